"""The REST front end: one ASGI app for TF Serving's REST API and KServe V2, and its server.

Needs ``servinglib[rest]``.
"""

from servinglib.server.observe.request_record import RequestObserver as RequestObserver
from servinglib.server.observe.request_record import RequestRecord as RequestRecord
from servinglib.server.rest.app import RestApp as RestApp
from servinglib.server.rest.app import create_app as create_app
from servinglib.server.rest.http_limits import HttpLimits as HttpLimits
from servinglib.server.rest.options import RestOptions as RestOptions
from servinglib.server.rest.server import RestServer as RestServer
from servinglib.server.rest.server import create_server as create_server
from servinglib.server.rest.tls import RestTls as RestTls

__all__ = [
    "HttpLimits",
    "RequestObserver",
    "RequestRecord",
    "RestApp",
    "RestOptions",
    "RestServer",
    "RestTls",
    "create_app",
    "create_server",
]
