"""TF Serving's ModelService: GetModelStatus and HandleReloadConfigRequest."""

from __future__ import annotations

from typing import Any, Final, final

from servinglib.core.servable_state import ManagerState
from servinglib.protos import get_model_status_pb2, model_management_pb2
from servinglib.server.config import ModelServerConfig
from servinglib.server.grpc._convert import model_spec_of
from servinglib.server.grpc._rpc import Context, Rpc
from servinglib.server.grpc._step import Steps, blocking
from servinglib.server.management.model_management import ModelManagement
from servinglib.server.plane.data_plane import DataPlane

SERVICE: Final = "tensorflow.serving.ModelService"
_State = get_model_status_pb2.ModelVersionStatus.State
_STATE: Final[dict[ManagerState, int]] = {
    ManagerState.START: _State.START,
    ManagerState.LOADING: _State.LOADING,
    ManagerState.AVAILABLE: _State.AVAILABLE,
    ManagerState.UNLOADING: _State.UNLOADING,
    ManagerState.END: _State.END,
}


@final
class ModelServicer:
    """TF Serving's ModelService over a DataPlane.

    A reload goes through ``management`` (PERMISSION_DENIED unless remote
    management is on; paths confined to its roots) and blocks while new
    models load: on a worker thread under grpc.aio, so the event loop keeps
    serving meanwhile.
    Thread-safe: it holds no mutable state.
    """

    def __init__(self, plane: DataPlane, management: ModelManagement) -> None:
        self._plane = plane
        self._management = management

    def rpcs(self) -> list[Rpc[Any]]:
        """The service's RPCs, for registration under :data:`SERVICE`."""
        return [
            Rpc(
                "GetModelStatus",
                "model_status",
                get_model_status_pb2.GetModelStatusRequest,
                self.get_model_status,
                lambda request: request.model_spec.name,
            ),
            Rpc(
                "HandleReloadConfigRequest",
                "reload_config",
                model_management_pb2.ReloadConfigRequest,
                self.handle_reload_config_request,
            ),
        ]

    def get_model_status(
        self, request: get_model_status_pb2.GetModelStatusRequest, _context: Context
    ) -> get_model_status_pb2.GetModelStatusResponse:
        """Every version's state and error (or just the version the spec names), newest first."""
        spec = model_spec_of(request.model_spec, request.HasField("model_spec"))
        # The plane's status: labels resolved as over REST; a version whose calls hang says so.
        status = self._plane.questions.model_status(spec)
        response = get_model_status_pb2.GetModelStatusResponse()
        for entry in status.versions:
            item = response.model_version_status.add(version=entry.version)
            item.state = _STATE[entry.state]  # type: ignore[assignment]
            item.status.SetInParent()
            if entry.error is not None:
                item.status.error_code = entry.error.code.value  # type: ignore[assignment]
                item.status.error_message = entry.error.message
        return response

    def handle_reload_config_request(
        self, request: model_management_pb2.ReloadConfigRequest, _context: Context
    ) -> Steps[model_management_pb2.ReloadConfigResponse]:
        """Makes the request's config the complete desired state (ServerCore.reload_config).

        As TF Serving: an OK response carries an OK ``status``; a failure is
        the RPC's status (code and message), and the previous config keeps
        serving when the new one is rejected.  Unlike TF Serving, refused
        (PERMISSION_DENIED) unless remote model management is on.
        """
        self._management.check_enabled("Reloading the model config")
        config = ModelServerConfig.from_proto(request.config)
        yield from blocking(self._management.reload_config, config)
        response = model_management_pb2.ReloadConfigResponse()
        response.status.SetInParent()
        return response
