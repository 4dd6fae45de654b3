"""Codecs between servinglib's protos and plain Python: no TensorFlow needed.

Importing this package imports protobuf (``import servinglib`` does not import it).
"""

from servinglib.codecs.dtypes import data_type_name as data_type_name
from servinglib.codecs.dtypes import data_type_to_numpy as data_type_to_numpy
from servinglib.codecs.dtypes import numpy_to_data_type as numpy_to_data_type
from servinglib.codecs.dtypes import numpy_to_v2_datatype as numpy_to_v2_datatype
from servinglib.codecs.dtypes import v2_datatype_to_numpy as v2_datatype_to_numpy
from servinglib.codecs.example import features_of as features_of
from servinglib.codecs.example import make_example as make_example
from servinglib.codecs.example import serialize_examples as serialize_examples
from servinglib.codecs.limits import DecodeLimits as DecodeLimits
from servinglib.codecs.tensor import from_numpy as from_numpy
from servinglib.codecs.tensor import to_numpy as to_numpy
from servinglib.codecs.tfrecord import read_records as read_records
from servinglib.codecs.tfrecord import write_records as write_records
from servinglib.codecs.v2_raw import decode_raw as decode_raw
from servinglib.codecs.v2_raw import encode_raw as encode_raw

__all__ = [
    "DecodeLimits",
    "data_type_name",
    "data_type_to_numpy",
    "decode_raw",
    "encode_raw",
    "features_of",
    "from_numpy",
    "make_example",
    "numpy_to_data_type",
    "numpy_to_v2_datatype",
    "read_records",
    "serialize_examples",
    "to_numpy",
    "v2_datatype_to_numpy",
    "write_records",
]
