"""The gRPC front end: TF Serving's PredictionService and ModelService, KServe V2's
GRPCInferenceService and grpc.health.v1.Health, on grpcio's synchronous server or grpc.aio.

``server, port = create_server(core, GrpcServerOptions(port=8500))`` then
``await server.start()`` inside a running event loop (the CLI runs it beside
the REST server on one loop).  Importing this package imports grpc;
``import servinglib`` does not import it.
"""

from servinglib.server.grpc._rpc import RpcRecord as RpcRecord
from servinglib.server.grpc.options import GrpcServerOptions as GrpcServerOptions
from servinglib.server.grpc.options import SslConfig as SslConfig
from servinglib.server.grpc.options import parse_channel_arguments as parse_channel_arguments
from servinglib.server.grpc.server import GrpcServer as GrpcServer
from servinglib.server.grpc.server import create_server as create_server

__all__ = [
    "GrpcServer",
    "GrpcServerOptions",
    "RpcRecord",
    "SslConfig",
    "create_server",
    "parse_channel_arguments",
]
