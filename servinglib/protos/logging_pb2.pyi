from servinglib.protos import model_pb2 as _model_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LogMetadata(_message.Message):
    __slots__ = ("model_spec", "request_id", "request_parameters")
    class RequestParametersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: LoggedParameter
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[LoggedParameter, _Mapping]] = ...) -> None: ...
    MODEL_SPEC_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    model_spec: _model_pb2.ModelSpec
    request_id: str
    request_parameters: _containers.MessageMap[str, LoggedParameter]
    def __init__(self, model_spec: _Optional[_Union[_model_pb2.ModelSpec, _Mapping]] = ..., request_id: _Optional[str] = ..., request_parameters: _Optional[_Mapping[str, LoggedParameter]] = ...) -> None: ...

class LoggedParameter(_message.Message):
    __slots__ = ("bool_value", "int64_value", "double_value", "string_value")
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    INT64_VALUE_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    bool_value: bool
    int64_value: int
    double_value: float
    string_value: str
    def __init__(self, bool_value: _Optional[bool] = ..., int64_value: _Optional[int] = ..., double_value: _Optional[float] = ..., string_value: _Optional[str] = ...) -> None: ...
