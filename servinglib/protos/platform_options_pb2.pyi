from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class PythonPlatformOptions(_message.Message):
    __slots__ = ("allow_code_execution", "entry_point", "class_name", "model_process", "instance_count")
    ALLOW_CODE_EXECUTION_FIELD_NUMBER: _ClassVar[int]
    ENTRY_POINT_FIELD_NUMBER: _ClassVar[int]
    CLASS_NAME_FIELD_NUMBER: _ClassVar[int]
    MODEL_PROCESS_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_COUNT_FIELD_NUMBER: _ClassVar[int]
    allow_code_execution: bool
    entry_point: str
    class_name: str
    model_process: bool
    instance_count: int
    def __init__(self, allow_code_execution: _Optional[bool] = ..., entry_point: _Optional[str] = ..., class_name: _Optional[str] = ..., model_process: _Optional[bool] = ..., instance_count: _Optional[int] = ...) -> None: ...

class TensorFlowPlatformOptions(_message.Message):
    __slots__ = ("saved_model_tags", "intra_op_parallelism_threads", "inter_op_parallelism_threads", "model_process")
    SAVED_MODEL_TAGS_FIELD_NUMBER: _ClassVar[int]
    INTRA_OP_PARALLELISM_THREADS_FIELD_NUMBER: _ClassVar[int]
    INTER_OP_PARALLELISM_THREADS_FIELD_NUMBER: _ClassVar[int]
    MODEL_PROCESS_FIELD_NUMBER: _ClassVar[int]
    saved_model_tags: _containers.RepeatedScalarFieldContainer[str]
    intra_op_parallelism_threads: int
    inter_op_parallelism_threads: int
    model_process: bool
    def __init__(self, saved_model_tags: _Optional[_Iterable[str]] = ..., intra_op_parallelism_threads: _Optional[int] = ..., inter_op_parallelism_threads: _Optional[int] = ..., model_process: _Optional[bool] = ...) -> None: ...
