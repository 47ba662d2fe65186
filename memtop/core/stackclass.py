"""What a Python thread is waiting on, from its stack: one rule table for classifier and UI.

Classes: sync (waiting for the GPU), copy (host<->device transfer), data (input pipeline),
comm (in a torch.distributed collective or waiting on one), other (Python/host work), idle (thread
asleep).

Attribution is by the innermost relevant frame: a library frame that is itself a known wait or
copy (torch.cuda.synchronize, jax block_until_ready, cupy asarray) names the class; a user line's
text counts only when that line is the leaf, i.e. the thread is inside native code called from it
(`acc += model(x).item()` with the forward pass deeper is the forward pass, not a sync).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from memtop.core.model import StackFrame

# waiting on the input pipeline wins: the user line above it may well hold a .to(
_DATA_FILE = re.compile(r"torch/utils/data/(dataloader|_utils/(fetch|collate|worker|pin_memory))\.py$")

# A collective, or a wait on one: like the input pipeline, it wins over a CUDA sync deeper down (a
# c10d work's wait synchronizes a stream). FSDP and DDP only by their communication functions:
# their forward wrappers also sit above ordinary compute.
_COMM_FRAMES: tuple[tuple[re.Pattern[str], re.Pattern[str]], ...] = (
    (
        re.compile(r"/torch/distributed/distributed_c10d\.py$"),
        re.compile(
            r"^(all_reduce\w*|all_gather\w*|reduce_scatter\w*|all_to_all\w*|broadcast\w*|barrier|"
            r"monitored_barrier|reduce|gather\w*|scatter\w*|send|recv|isend|irecv|batch_isend_irecv|wait\w*)$"
        ),
    ),
    (
        re.compile(r"/torch/distributed/(fsdp|_composable/fsdp)/"),
        re.compile(
            r"^_*(wait|wait_for_unshard|wait_for_post_backward\w*|\w*all_gather\w*|\w*reduce_scatter\w*|"
            r"unshard\w*|foreach_reduce\w*)$"
        ),
    ),
    (
        re.compile(r"/torch/nn/parallel/distributed\.py$"),
        re.compile(
            r"^(_sync_\w*|_match_all_reduce\w*|_distributed_broadcast_coalesced|_check_global_requires\w*)$"
        ),
    ),
    # native leaves from `py-spy --native`
    (
        re.compile(r""),
        re.compile(r"(^|::)(nccl[A-Z]\w*|WorkNCCL::(wait|synchronize)\w*|Reducer::finalize_backward)$"),
    ),
)
# the leaf user line, in native code: a collective called directly, or a work handle's wait
_COMM_CODE = re.compile(
    r"\b(dist|torch\.distributed)\.(all_reduce|all_gather\w*|reduce_scatter\w*|all_to_all\w*|broadcast|"
    r"barrier|reduce|gather|scatter|send|recv)\(|\b\w*(work|handle|req|fut)\w*\.wait\(",
    re.I,
)

# Library frames that are themselves the wait or the copy: (class, file pattern, function pattern).
_LIB_FRAMES: tuple[tuple[str, re.Pattern[str], re.Pattern[str]], ...] = (
    ("sync", re.compile(r"/torch/cuda/"), re.compile(r"(^|\.)(synchronize|wait|query)$")),
    (
        "sync",
        re.compile(r"/torch/"),
        re.compile(
            r"(^|\.)(item|tolist|__bool__|__float__|__int__|__index__|__format__|_local_scalar_dense)$"
        ),
    ),
    (
        "sync",
        re.compile(r"/jax/|/jaxlib/"),
        re.compile(
            r"(^|\.)(block_until_ready|device_get|__float__|__int__|__bool__|__index__|"
            r"_value|__array__|tolist|item|_single_device_array_to_np_array\w*)$"
        ),
    ),
    ("copy", re.compile(r"/jax/|/jaxlib/"), re.compile(r"(^|\.)(device_put\w*|_device_put\w*)$")),
    ("sync", re.compile(r"/cupy/"), re.compile(r"(^|\.)(synchronize|get|asnumpy|tolist|item)$")),
    ("copy", re.compile(r"/cupy/"), re.compile(r"(^|\.)(asarray|array|set)$")),
    ("copy", re.compile(r"/torch/"), re.compile(r"(^|\.)(pin_memory|_pin_memory_loop)$")),
    # native leaves from `py-spy --native`
    (
        "sync",
        re.compile(r""),
        re.compile(
            r"(^|\.|::)((cudaStreamSynchronize|cudaDeviceSynchronize|cudaEventSynchronize|cuStreamSynchronize|"
            r"cuEventSynchronize|cuCtxSynchronize|cuMemcpyDtoH)(_v\d+)?|"  # a synchronous D2H copy waits for the GPU
            r"_local_scalar_dense\w*|nonzero\w*)$"
        ),
    ),
    ("copy", re.compile(r""), re.compile(r"(^|\.|::)(cudaMemcpy\w*|cuMemcpy\w*)$")),  # async and staged
)

# A dtype or layout argument: x.to(torch.bfloat16) converts on the device, it copies nothing across.
_NOT_DEVICE = r"(?!\s*(torch\.)?(u?int\d*|float\d*|bfloat16|half|double|long|short|bool|complex\d*|dtype=|memory_format=|[a-z_]*dtype\b))"
# The leaf line's text, when the thread is in native code called from it.
_LEAF_CODE: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "sync",
        re.compile(
            r"\.(item|cpu|tolist|numpy|nonzero|synchronize|block_until_ready|get)\(|torch\.(equal|nonzero|cuda\.synchronize)\(|"
            r"\bjax\.device_get\(|\b(float|int|bool)\(|^\s*(if|elif|while|assert)\b.*\.(any|all)\(\)|"
            r"\[[^\]]*[<>=!]=?[^\]]*\]"  # masked indexing: x[x > 0]
        ),
    ),
    (
        "copy",
        re.compile(
            rf"\.to\({_NOT_DEVICE}|\.(cuda|copy_|pin_memory)\(|non_blocking=|\b(device_put|cp\.asarray|cupy\.asarray)\("
        ),
    ),
    ("data", re.compile(r"^\s*for\b.+\bin\b.*(loader|_dl|dataloader)\b", re.I)),
)

# Files of the runtime itself: the "user" frame is the first one outside them.
_LIB = re.compile(r"(/torch/|/site-packages/|/dist-packages/|<frozen |/lib/python3\.\d+/)")


def native(f: StackFrame) -> bool:
    """A C/C++ frame of a ``py-spy --native`` dump: a shared object, no Python line."""
    return f.line == 0 and not f.file.endswith(".py")


def user_frame(frames: Sequence[StackFrame]) -> StackFrame | None:
    for f in frames:
        if not _LIB.search(f.file) and not native(f):
            return f
    return None


def classify(frames: Sequence[StackFrame], active: bool, gil: bool | None = None) -> str:
    """Class of one thread's stack (frames leaf first). ``gil``: whether the thread held the GIL
    (None: unknown). A user line's text names a wait only while the GIL is released: a thread
    running Python on that line is working, not waiting."""
    if not frames:
        return "idle" if not active else "other"
    if any(_DATA_FILE.search(f.file) for f in frames):
        return "data"
    if any(fp.search(f.file) and np.search(f.name) for f in frames for fp, np in _COMM_FRAMES):
        return "comm"
    for f in frames:  # leaf first, down to the first frame of user code
        if _LIB.search(f.file) or not f.file.endswith(".py"):
            for klass, file_pat, func_pat in _LIB_FRAMES:
                if func_pat.search(f.name) and file_pat.search(f.file):
                    return klass
            continue
        if f is frames[0] and gil is not True and f.code:
            if _COMM_CODE.search(f.code):
                return "comm"
            for klass, pat in _LEAF_CODE:
                if pat.search(f.code):
                    return klass
        break
    return "other" if active else "idle"


def site(frames: Sequence[StackFrame]) -> tuple[str, str]:
    """(file:line, source text) of the frame a user would edit, else of the leaf."""
    f = user_frame(frames) or (frames[0] if frames else None)
    if f is None:
        return "?", ""
    code = re.sub(r"\s+#[^'\"]*$", "", f.code)[:80]  # a trailing comment explains nothing here
    return f"{f.file.rsplit('/', 1)[-1]}:{f.line}", code
