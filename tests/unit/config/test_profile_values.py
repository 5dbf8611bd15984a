"""Values in a profile: YAML's true/false where a number belongs and .nan/.inf fail at load,
naming the key, in every section (one rule on the config base); mappings of thresholds and
temperatures hold values of their scale; routing slugs are usable. Found by mutating every
leaf of configs/sim.yaml."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from serve_app.config.loader import ConfigError, parse_config, read_document

ROOT = Path(__file__).resolve().parents[3]
SIM = read_document(ROOT / "configs" / "sim.yaml")


def _error(edit) -> tuple[list[str], str]:
    document = copy.deepcopy(SIM)
    edit(document["applications"][0]["args"])
    with pytest.raises(ConfigError) as err:
        parse_config(document)
    return err.value.paths, str(err.value)


def _intent(args):
    return args["routing"]["signals"]["intent"]


@pytest.mark.parametrize("edit, key", [
    (lambda a: a["models"][0]["engine"].update(tensor_parallel_size=True), "models[0].engine.tensor_parallel_size"),
    (lambda a: a["models"][0]["sampling"].update(temperature=False), "models[0].sampling.temperature"),
    (lambda a: a["simulation"].update(latency_scale=True), "simulation.latency_scale"),
    (lambda a: a["routing"]["sampling_matrix"].update(code=True), "routing.sampling_matrix.code"),
    (lambda a: _intent(a)["thresholds"].update({"BAAI/bge-m3": True}), "routing.signals.intent.thresholds.BAAI/bge-m3"),
])
def test_true_or_false_where_a_number_belongs_fails_naming_the_key(edit, key):
    paths, text = _error(edit)
    assert paths == [key] and "expected a number, got " in text


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("edit, key", [
    (lambda a, v: a["routing"]["sampling_matrix"].update(code=v), "routing.sampling_matrix.code"),
    (lambda a, v: _intent(a)["min_scores"].update(safety=v), "routing.signals.intent.min_scores.safety"),
    (lambda a, v: a["simulation"].update(latency_scale=v), "simulation.latency_scale"),
])
def test_nan_and_infinity_fail_naming_the_key(edit, key, value):
    paths, _ = _error(lambda a: edit(a, value))
    assert paths == [key]


@pytest.mark.parametrize("edit, key, says", [
    (lambda a: a["routing"]["sampling_matrix"].update(code=-1), "routing.sampling_matrix.code", "greater than or equal to 0"),
    (lambda a: a["routing"]["sampling_matrix"].update(chat=2.5), "routing.sampling_matrix.chat", "less than or equal to 2"),
    (lambda a: _intent(a)["min_scores"].update(safety=1.5), "routing.signals.intent.min_scores.safety",
     "less than or equal to 1"),
    (lambda a: _intent(a)["thresholds"].update({"BAAI/bge-m3": 2}), "routing.signals.intent.thresholds.BAAI/bge-m3",
     "less than or equal to 1"),
])
def test_a_mapping_of_temperatures_or_cosines_holds_values_of_that_scale(edit, key, says):
    paths, text = _error(edit)
    assert paths == [key] and says in text


def test_whole_numbers_and_the_shipped_profiles_still_load():
    document = copy.deepcopy(SIM)
    document["applications"][0]["args"]["routing"]["sampling_matrix"]["code"] = 1  # an int temperature
    assert parse_config(document).routing.sampling_matrix["code"] == 1.0
    for name in ("sim", "local", "fleet"):
        parse_config(read_document(ROOT / "configs" / f"{name}.yaml"))


@pytest.mark.parametrize("names, key, says", [
    ([""], "global.router.auto_model_names[0]", "should match pattern"),
    # A client's model is matched as sent: a slug with a space could never be asked for.
    (["auto", " auto"], "global.router.auto_model_names[1]", "should match pattern"),
    (["vllm sr/auto"], "global.router.auto_model_names[0]", "should match pattern"),
    (["vllm-sr/fusion", "auto"], "global.router.auto_model_names",
     "['vllm-sr/fusion'] also in global.integrations.looper.fusion.model_names"),
])
def test_a_routing_slug_no_request_can_use_unambiguously_fails_at_load(names, key, says):
    # Found with the same mutation run: both passed, one slug reaching two entry points.
    paths, text = _error(lambda a: a.setdefault("global", {}).setdefault("router", {}).update(auto_model_names=names))
    assert paths == [key] and says in text


def test_an_engine_dtype_vllm_does_not_know_fails_at_load():
    paths, text = _error(lambda a: a["models"][0]["engine"].update(dtype="bf16"))
    assert paths == ["models[0].engine.dtype"] and "'bfloat16'" in text
