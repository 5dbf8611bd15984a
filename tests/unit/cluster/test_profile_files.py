"""What `horizon validate` and `horizon plan` say about files and arguments they cannot use:
one line naming the file or the key, exit 1 (or argparse's 2), never a traceback, and no
profile that validate passes and `serve run`'s app builder then refuses."""

from __future__ import annotations

import pytest
import yaml
from cluster_helpers import ROOT, fleet_document, fleet_with, model_entry

from serve_app.capacity.facts import FactsError, load_model_facts
from serve_app.capacity.planner import check_placement
from serve_app.cli import main
from serve_app.config.loader import ConfigError, read_document

# name -> (file content as bytes or None for a directory, what the message says)
BROKEN_FILES = {
    "missing": (None, "file not found"),
    "directory": (b"", "cannot read: Is a directory"),
    "not_utf8": (b"\xff\xfe\x00models: {}\n", "not UTF-8 text"),
    "bad_yaml": (b"models: [1,\n", "YAML syntax error"),
}


def _broken(tmp_path, name):
    content, says = BROKEN_FILES[name]
    path = tmp_path / f"{name}.yaml"
    if name == "directory":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    return path, says


@pytest.mark.parametrize("name", sorted(BROKEN_FILES))
def test_a_profile_that_cannot_be_read_is_one_line_naming_it(tmp_path, name, capsys):
    path, says = _broken(tmp_path, name)
    with pytest.raises(ConfigError) as err:
        read_document(path)
    assert err.value.errors[0][0] == "" and says in err.value.errors[0][1]
    assert main(["validate", str(path)]) == 1
    assert f"invalid configuration {path}:" in capsys.readouterr().err
    assert main(["plan", str(path)]) == 1
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(BROKEN_FILES) + ["not_a_mapping", "unknown_keys"])
def test_a_facts_file_that_cannot_be_used_names_the_profile_key(tmp_path, name, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    if name == "not_a_mapping":
        path, says = tmp_path / "list.yaml", "expected a mapping at the top level"
        path.write_text("- 1\n- 2\n", encoding="utf-8")
    elif name == "unknown_keys":
        path, says = tmp_path / "profile.yaml", "applications: unknown key"
        path.write_text((ROOT / "configs" / "sim.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    else:
        path, says = _broken(tmp_path, name)

    with pytest.raises(FactsError) as err:
        load_model_facts(path)
    assert says in str(err.value) and "pydantic" not in str(err.value)

    def edit(document):
        document["applications"][0]["args"]["cluster"]["planning"]["facts_file"] = str(path)

    # What `serve run`'s app builder runs first: a load error naming the key, not a traceback.
    with pytest.raises(ConfigError) as err:
        check_placement(fleet_with(edit))
    assert err.value.paths == ["cluster.planning.facts_file"]
    assert str(path) in str(err.value) and says in str(err.value)

    document = fleet_document()
    edit(document)
    profile = tmp_path / "fleet.yaml"
    profile.write_text(yaml.safe_dump(document), encoding="utf-8")
    assert main(["validate", str(profile)]) == 1
    assert f"cluster.planning.facts_file: {path}" in capsys.readouterr().err
    assert main(["plan", "configs/fleet.yaml", "--facts", str(path)]) == 1
    err_text = capsys.readouterr().err
    assert f"invalid model facts file {path}:" in err_text and says in err_text


def test_validate_refuses_a_placement_serve_run_would_refuse(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert main(["validate", "configs/fleet.yaml"]) == 0
    capsys.readouterr()
    document = fleet_document()
    model_entry(document, "k2")["engine"]["tensor_parallel_size"] = 16
    profile = tmp_path / "fleet.yaml"
    profile.write_text(yaml.safe_dump(document), encoding="utf-8")
    assert main(["validate", str(profile)]) == 1
    err = capsys.readouterr().err
    assert "impossible placement: k2: a replica needs 16 GPUs" in err


@pytest.mark.parametrize("flag, value, says", [
    ("--context", "0", "must be at least 1"),
    ("--context", "-5", "must be at least 1"),
    ("--context", "lots", "expected a whole number"),
    ("--qps", "k2=lots", "expected a number"),
    ("--qps", "k2=0", "above 0"),
    ("--qps", "k2=-1", "above 0"),
    ("--qps", "k2=nan", "above 0"),
    ("--qps", "k2=inf", "above 0"),
    ("--qps", "k2", "expected alias=QPS"),
    ("--tokens", "k2=1.5", "expected a whole number"),
    ("--tokens", "k2=0", "at least 1"),
    ("--latency", "k2=0", "above 0"),
    ("--latency", "=3", "expected alias=SECONDS"),
])
def test_plan_refuses_arguments_it_cannot_plan_with(flag, value, says, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit) as exit_:
        main(["plan", "configs/fleet.yaml", flag, value])
    assert exit_.value.code == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("edit, key", [
    (lambda a: model_entry_args(a, "k2")["placement"]["resources"].update(horizon_node_a=-1),
     "models[0].placement.resources.horizon_node_a"),
    (lambda a: a["cluster"]["node_types"][0]["resources"].update(horizon_node_a=-1),
     "cluster.node_types[0].resources.horizon_node_a"),
    (lambda a: model_entry_args(a, "k2")["engine"].update(served_model_name=""), "models[0].engine.served_model_name"),
    (lambda a: a["cluster"].update(image=""), "cluster.image"),
    (lambda a: a["cluster"].update(namespace="Horizon_Prod"), "cluster.namespace"),
    (lambda a: a["cluster"].update(ray_version="latest"), "cluster.ray_version"),
    (lambda a: a["cluster"].update(name="2-horizon"), "cluster.name"),
    (lambda a: a["cluster"].update(name="k2-horizon-" + "x" * 37), "cluster.name"),
    (lambda a: a["cluster"]["node_types"][0].update(labels={"horizon.io/node pool": "a"}),
     "cluster.node_types[0].labels"),
    (lambda a: a["cluster"]["node_types"][0].update(labels={"horizon.io/node-pool": "a/b"}),
     "cluster.node_types[0].labels"),
    (lambda a: model_entry_args(a, "k2")["placement"].update(node_labels={"-pool": "a"}),
     "models[0].placement.node_labels"),
])
def test_values_ray_or_kubernetes_would_refuse_later_fail_at_load(edit, key):
    # Each passed validation: Ray refuses a negative resource when it schedules and a label
    # outside Kubernetes label syntax at `ray start` (or in a label selector); Kubernetes an
    # empty image or a namespace with capitals when the manifest is applied, and KubeRay a
    # RayService named other than a DNS-1035 label of at most 47 characters.
    with pytest.raises(ConfigError) as err:
        fleet_with(lambda doc: edit(doc["applications"][0]["args"]))
    assert err.value.paths == [key]


def model_entry_args(args, alias):
    return next(m for m in args["models"] if m["alias"] == alias)
