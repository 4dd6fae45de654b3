"""``pb_utils.ModelConfig``: the config a model's ``auto_complete_config`` completes.

Its checks and messages follow Triton's Python backend
(``triton_python_backend_utils.ModelConfig``): a model may set the inputs, outputs,
``max_batch_size``, dynamic batching and the transaction policy, and may not contradict
what the ``config.pbtxt`` already says.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, final

_INPUT_PROPERTIES = ("name", "data_type", "dims", "optional")
_OUTPUT_PROPERTIES = ("name", "data_type", "dims")


@final
class ModelConfig:
    """A model configuration being auto-completed: ``ModelConfig(json_text)``, ``as_dict()``.

    Not thread-safe: one ``auto_complete_config`` call uses it.
    """

    def __init__(self, model_config: str) -> None:
        self._model_config: dict[str, Any] = json.loads(model_config)
        self._model_config.setdefault("input", [])
        self._model_config.setdefault("output", [])
        self._model_config.setdefault("max_batch_size", 0)

    def as_dict(self) -> dict[str, Any]:
        """The configuration as a dict (read it; change it with the setters)."""
        return self._model_config

    def set_max_batch_size(self, max_batch_size: int) -> None:
        """Sets ``max_batch_size``; ValueError if the config already says a larger one."""
        configured = self._model_config["max_batch_size"]
        if configured > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {configured}, but in "
                f"auto-complete-config function for model '{self._name}' specified "
                f"max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        """Sets dynamic batching (default settings) unless set; ValueError under another
        scheduler (sequence batching, an ensemble)."""
        for scheduler in ("sequence_batching", "ensemble_scheduling"):
            if scheduler in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{scheduler}', but "
                    f"auto-complete-config function for model '{self._name}' tries to set "
                    "scheduling_choice as 'dynamic_batching'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def add_input(self, input: Mapping[str, Any]) -> None:
        """Adds an input (name, data_type, dims, optional), or completes the configured one of
        that name; ValueError for other properties, a missing one, or a contradiction."""
        self._add("input", input, _INPUT_PROPERTIES)

    def add_output(self, output: Mapping[str, Any]) -> None:
        """Adds an output (name, data_type, dims), or completes the configured one of that
        name; ValueError as :meth:`add_input`."""
        self._add("output", output, _OUTPUT_PROPERTIES)

    def set_model_transaction_policy(self, transaction_policy_dict: Mapping[str, Any]) -> None:
        """Sets ``model_transaction_policy`` (``{"decoupled": bool}``); ValueError for other
        properties, or to change a ``decoupled`` the config already sets."""
        for key in transaction_policy_dict:
            if key != "decoupled":
                raise ValueError(
                    "model transaction property in auto-complete-config function for model "
                    f"'{self._name}' contains property other than 'decoupled'."
                )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" not in transaction_policy_dict:
            return
        wanted = transaction_policy_dict["decoupled"]
        if "decoupled" in policy and policy["decoupled"] != wanted:
            raise ValueError(
                "trying to change decoupled property in auto-complete-config for model "
                f"'{self._name}', which is already set to '{policy['decoupled']}'."
            )
        policy["decoupled"] = wanted

    @property
    def _name(self) -> str:
        return str(self._model_config.get("name", ""))

    def _add(self, kind: str, tensor: Mapping[str, Any], properties: tuple[str, ...]) -> None:
        allowed = ", ".join(f"'{p}'" for p in properties)
        label = f"{kind} '{tensor.get('name', '')}' in auto-complete-config function for model"
        for key in tensor:
            if key not in properties:
                raise ValueError(f"{label} '{self._name}' contains property other than {allowed}.")
        for key in ("name", "data_type", "dims"):
            if key not in tensor:
                raise ValueError(f"{label} '{self._name}' is missing '{key}' property.")
        for current in self._model_config[kind]:
            if current["name"] == tensor["name"]:
                self._complete(kind, current, tensor)
                return
        self._model_config[kind].append(dict(tensor))

    def _complete(self, kind: str, current: dict[str, Any], tensor: Mapping[str, Any]) -> None:
        name = tensor["name"]
        configured_type = current.get("data_type", "TYPE_INVALID")
        if configured_type not in ("TYPE_INVALID", tensor["data_type"]):
            raise ValueError(
                f"unable to load model '{self._name}', configuration expects datatype "
                f"{configured_type} for {kind} '{name}', model provides {tensor['data_type']}"
            )
        configured_dims = [int(d) for d in current.get("dims", [])]
        if configured_dims and configured_dims != [int(d) for d in tensor["dims"]]:
            raise ValueError(
                f"model '{self._name}', tensor '{name}': the model expects dims "
                f"{list(tensor['dims'])} but the model configuration specifies dims "
                f"{configured_dims}"
            )
        current.update(tensor)
