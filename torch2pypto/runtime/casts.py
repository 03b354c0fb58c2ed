"""The casts a cast kernel makes (pypto_cast launches on them; the table's launches hook reads them)."""

import torch

# the dtypes a cast kernel makes from each input dtype, exactly as torch casts (casting._cast_route:
# A2/A3's casts). Not: an integer to bfloat16, int64 to float16 (rounded twice through FP32), int64 to
# int32 (torch wraps a value out of range; the chip's cast is not known to)
_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_CASTS = {
    **{f: (*_FLOATS, torch.int32, torch.int64, torch.bool) for f in _FLOATS},
    torch.int32: (torch.float32, torch.float16, torch.int64, torch.bool),
    torch.int64: (torch.float32, torch.bool),
    torch.bool: (*_FLOATS, torch.int32, torch.int64),
}
