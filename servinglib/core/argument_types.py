"""The type checks of core's own arguments (ServableId, ServableData, Loader).

Each raises (or returns) the TypeError of :func:`servinglib.errors.wrong_type`.
"""

from __future__ import annotations

from servinglib.core.loader import Loader
from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId
from servinglib.errors import wrong_type


def not_a_servable_request(request: object) -> TypeError:
    """The TypeError for a manager's ``servable_handle()`` given something else."""
    return wrong_type(
        "A manager's servable_handle() request",
        "a ServableRequest (ServableRequest.latest(name) or .specific(name, version)); "
        "a ModelSpec is what ServerCore.servable_handle() takes",
        request,
    )


def check_servable_id(servable_id: object, where: str) -> None:
    """Raises TypeError unless ``servable_id`` is a ServableId."""
    if not isinstance(servable_id, ServableId):
        raise wrong_type(
            f"The servable_id given to {where}", "a ServableId(name, version)", servable_id
        )


def check_servable_data(data: object, where: str) -> None:
    """Raises TypeError unless ``data`` is a ServableData."""
    if not isinstance(data, ServableData):
        raise _not_servable_data(data, where, "data")


def check_loader_data(data: object, where: str) -> None:
    """Raises TypeError unless ``data`` is a ServableData holding a Loader (or an error)."""
    if not isinstance(data, ServableData):
        raise _not_servable_data(data, where, "loader")
    if data.ok and not isinstance(data.data, Loader):
        raise wrong_type(f"The data of servable {data.id} given to {where}", "a Loader", data.data)


def _not_servable_data(data: object, where: str, holding: str) -> TypeError:
    return wrong_type(
        f"Each version given to {where}",
        f"a ServableData (ServableData.of(ServableId(name, version), {holding}))",
        data,
    )
