import pytest
from routing_fakes import VOCABULARY, BagOfWordsEmbedder, write_templates


@pytest.fixture
def template_dir(tmp_path):
    return write_templates(tmp_path / "intents")


@pytest.fixture
def embedder():
    return BagOfWordsEmbedder(VOCABULARY)
