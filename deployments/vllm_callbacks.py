"""``ray.serve.llm`` start-up callback of Horizon's vLLM deployments.

Before an engine starts, ``ray.serve.llm`` runs a Ray task on every node of the replica's
placement group to download the model there. For a model that is already a directory on the
node (the CPU profiles' locally built checkpoint), that task downloads nothing, yet it costs a
fresh worker process that imports torch and transformers: on two cores about 20 s of a first
start and ~0.8 GB of an idle worker afterwards. The callback hook ``CallbackCtx.run_init_node``
exists to skip it; this callback does so only when the source is a local directory.
"""

from __future__ import annotations

import os

# The base class ``LLMConfig.callback_config.callback_class`` must derive from (ray.serve.llm
# exposes the config field, not the class).
from ray.llm._internal.common.callbacks.base import CallbackBase

CALLBACK_CLASS = "deployments.vllm_callbacks.LocalCheckpointCallback"


class LocalCheckpointCallback(CallbackBase):
    async def on_before_node_init(self) -> None:
        source = self.llm_config.model_loading_config.model_source
        if isinstance(source, str) and os.path.isdir(source):
            self.ctx.run_init_node = False
