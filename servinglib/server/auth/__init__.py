"""Who may call what: API groups locked behind a credential (Triton's restricted APIs)."""

from servinglib.server.auth.api_groups import GRPC_METHOD_GROUPS as GRPC_METHOD_GROUPS
from servinglib.server.auth.api_groups import REST_API_GROUPS as REST_API_GROUPS
from servinglib.server.auth.api_groups import ApiGroup as ApiGroup
from servinglib.server.auth.credential import Credential as Credential
from servinglib.server.auth.restricted_apis import GRPC_KEY_PREFIX as GRPC_KEY_PREFIX
from servinglib.server.auth.restricted_apis import RestrictedApis as RestrictedApis
from servinglib.server.auth.restricted_apis import Restriction as Restriction

__all__ = [
    "GRPC_KEY_PREFIX",
    "GRPC_METHOD_GROUPS",
    "REST_API_GROUPS",
    "ApiGroup",
    "Credential",
    "RestrictedApis",
    "Restriction",
]
