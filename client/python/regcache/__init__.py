"""regcache — the Python client of regcached, over the C ABI of libregcache.so with ctypes.

Pure Python: nothing to compile. It loads libregcache.so (see _load_library for where it looks)
and mirrors include/regcache/regcache.h: the same calls, the same codes, the same thread safety
(a Client may be used from several threads at once; close() must be the last call on it).

    import regcache
    with regcache.Client("/run/regcache") as c:
        mem = c.allocate(1 << 20)                 # daemon memory, mapped here and attached
        mem.buffer()[:5] = b"hello"               # a writable memoryview of the mapping
        with c.registered(mem.data, 4096, regcache.LOCAL_READ | regcache.REMOTE_WRITE) as key:
            send_to_peer(key.rkey, mem.data)      # key.lkey for local SGEs
    # leaving the block closes the session: the daemon invalidates every key of it

Every failure raises RegcacheError, whose .code is the canonical status code (REGCACHE_* /
absl::StatusCode numbers, e.g. regcache.NOT_FOUND) and .message the daemon's explanation.
"""
import ctypes
import ctypes.util
import enum
import os
import pathlib
import sys
import threading
import traceback
from dataclasses import dataclass
from typing import Callable, Optional

# The package's version: the project's (CMakeLists.txt), the same as pyproject.toml's and the
# library's (libregcache.so.0.1.0); tests/install checks that the three agree.
__version__ = "0.1.0"

# Canonical status codes (absl::StatusCode / gRPC numbering), as in regcache.h.
OK = 0
CANCELLED = 1
UNKNOWN = 2
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
NOT_FOUND = 5
ALREADY_EXISTS = 6
PERMISSION_DENIED = 7
RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9
ABORTED = 10
OUT_OF_RANGE = 11
UNIMPLEMENTED = 12
INTERNAL = 13
UNAVAILABLE = 14
DATA_LOSS = 15
UNAUTHENTICATED = 16

# Access bits of a registration.
LOCAL_READ = 1 << 0
LOCAL_WRITE = 1 << 1
REMOTE_READ = 1 << 2
REMOTE_WRITE = 1 << 3
REMOTE_ATOMIC = 1 << 4

# Prefetch of on-demand memory.
PREFETCH_NONE = 0
PREFETCH_SYNC = 1
PREFETCH_ASYNC = 2


class RegcacheError(Exception):
    """A failed call: .code (canonical status code), .code_name ("NOT_FOUND"), .message, and
    .reason, the daemon's stable reason ("KEY_QUOTA_EXCEEDED"; docs/api.md) or "" if none."""

    def __init__(self, code, message, reason=""):
        self.code = code
        self.message = message
        self.reason = reason
        self.code_name = _lib.regcache_code_name(code).decode()
        super().__init__(f"{self.code_name}: {message}")


# --- The C structs (field for field as regcache.h declares them). ---

class _Options(ctypes.Structure):
    _fields_ = [("call_timeout_ms", ctypes.c_uint32), ("tcp_port", ctypes.c_uint16),
                ("no_fast_path", ctypes.c_uint8), ("no_client_cache", ctypes.c_uint8)]


class _Device(ctypes.Structure):
    _fields_ = [("index", ctypes.c_uint32), ("port", ctypes.c_uint8),
                ("key_bounds", ctypes.c_uint8), ("reserved", ctypes.c_uint8 * 2),
                ("node_guid", ctypes.c_uint64),
                ("gid", ctypes.c_uint8 * 16), ("name", ctypes.c_char * 65)]


@dataclass(frozen=True)
class Device:
    """The NIC a session lives on: every key of the session belongs to it."""
    index: int
    name: str
    node_guid: int
    port: int
    gid: bytes
    # What confines a peer holding one of the session's keys (docs/key_bounds.md): "key" or
    # "cut" (the key's own range), "attachment" (the whole attached memory the key lies in),
    # "unknown".
    key_bounds: str = "unknown"

    @property
    def key_range_enforced(self):
        return self.key_bounds in ("key", "cut")


class _Memory(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint64), ("data", ctypes.c_void_p), ("length", ctypes.c_uint64)]


class _Key(ctypes.Structure):
    _fields_ = [("handle", ctypes.c_uint64), ("lkey", ctypes.c_uint32),
                ("rkey", ctypes.c_uint32), ("va", ctypes.c_uint64), ("length", ctypes.c_uint64),
                ("access", ctypes.c_uint32), ("hit", ctypes.c_uint32),
                ("same_key", ctypes.c_uint32), ("reserved", ctypes.c_uint32)]


class _RegisterItem(ctypes.Structure):
    _fields_ = [("addr", ctypes.c_void_p), ("length", ctypes.c_uint64),
                ("access", ctypes.c_uint32), ("prefetch", ctypes.c_uint32)]


class _KeyInfo(ctypes.Structure):
    _fields_ = [("handle", ctypes.c_uint64), ("key", ctypes.c_uint32),
                ("access", ctypes.c_uint32), ("va", ctypes.c_uint64),
                ("length", ctypes.c_uint64), ("holders", ctypes.c_uint32),
                ("revoked", ctypes.c_uint32), ("is_window", ctypes.c_uint32),
                ("reserved", ctypes.c_uint32), ("parent", ctypes.c_uint64),
                ("key_state", ctypes.c_char * 32)]


class _Usage(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "live_registrations", "revoked_held", "cached_unreferenced", "backings", "backed_bytes",
        "pool_outstanding", "pool_total")]


class _QpAddress(ctypes.Structure):
    _fields_ = [("qpn", ctypes.c_uint32), ("psn", ctypes.c_uint32), ("gid", ctypes.c_uint8 * 16),
                ("lid", ctypes.c_uint16), ("reserved", ctypes.c_uint16), ("mtu", ctypes.c_uint32)]


class _Endpoint(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint64), ("local", _QpAddress), ("access", ctypes.c_uint32),
                ("reserved", ctypes.c_uint32)]


class _Descriptor(ctypes.Structure):
    _fields_ = [("node_guid", ctypes.c_uint64), ("gid", ctypes.c_uint8 * 16),
                ("port", ctypes.c_uint8), ("key_bounds", ctypes.c_uint8),
                ("has_endpoint", ctypes.c_uint8), ("reserved", ctypes.c_uint8),
                ("rkey", ctypes.c_uint32), ("addr", ctypes.c_uint64), ("length", ctypes.c_uint64),
                ("access", ctypes.c_uint32), ("reserved2", ctypes.c_uint32),
                ("endpoint", _QpAddress)]


class _Revocation(ctypes.Structure):
    _fields_ = [("handle", ctypes.c_uint64), ("key", ctypes.c_uint32), ("reason", ctypes.c_uint32)]


_RevocationFn = ctypes.CFUNCTYPE(None, ctypes.POINTER(_Revocation), ctypes.c_void_p)


class RevocationReason(enum.IntEnum):
    """Why a key stopped working (REGCACHE_REVOKED_* in regcache.h)."""
    INVALIDATED = 1         # invalidate(), from any thread of this process (or an admin)
    PARENT_INVALIDATED = 2  # a window whose registration was invalidated
    MEMORY_DETACHED = 3     # the memory under it was detached
    REREGISTERED = 4        # a re-registration narrowed it
    RECLAIMED = 5           # the daemon took it back under key pressure
    UNKNOWN = 100           # the library lost track of events (it fell behind)


@dataclass(frozen=True)
class Revocation:
    handle: int
    key: int  # 0 with UNKNOWN
    reason: RevocationReason


_KEY_BOUNDS_NAMES = {0: "unknown", 1: "key", 2: "cut", 3: "attachment"}
_KEY_BOUNDS_VALUES = {v: k for k, v in _KEY_BOUNDS_NAMES.items()}
DESCRIPTOR_MAX_BYTES = 96
DESCRIPTOR_MAX_TEXT = 134  # the text form's longest, its NUL included


# --- What the Python side hands out. ---

@dataclass(frozen=True)
class Memory:
    """Memory attached to the session and mapped in this process at address .data."""
    id: int
    data: int
    length: int

    def buffer(self):
        """A writable memoryview of the whole mapping (valid until detach or close)."""
        return memoryview((ctypes.c_char * self.length).from_address(self.data)).cast("B")


@dataclass(frozen=True)
class QpAddress:
    """One side of an RC connection (docs/endpoints.md): what the other side connects to."""
    qpn: int
    psn: int
    gid: bytes  # 16 raw bytes, network order
    lid: int = 0
    mtu: int = 0  # 0 in a request: the daemon port's active MTU

    def _c(self):
        if len(self.gid) != 16:
            raise ValueError("a GID is 16 bytes")
        return _QpAddress(self.qpn, self.psn, (ctypes.c_uint8 * 16)(*self.gid), self.lid, 0,
                          self.mtu)


@dataclass(frozen=True)
class Endpoint:
    """A target endpoint: the daemon's queue pair in the session's PD, connected to a peer."""
    id: int
    local: QpAddress  # hand it to the peer
    access: int


def _qp_from_c(q):
    return QpAddress(q.qpn, q.psn, bytes(q.gid), q.lid, q.mtu)


@dataclass(frozen=True)
class Descriptor:
    """What a remote peer needs to use one of the session's keys (docs/descriptors.md): the NIC
    (node_guid, gid, port), the key (rkey, and [addr, addr + length) with the remote rights in
    access) and, where the key is used through a target endpoint, the daemon's queue pair to
    connect to. pack() gives its bytes (64, or 96 with an endpoint), to_text() its text form
    ("rcd1:..."); Descriptor.unpack and Descriptor.from_text read them back, refusing anything
    malformed with RegcacheError (INVALID_ARGUMENT; FAILED_PRECONDITION for a newer format).
    A descriptor describes a key; it does not extend its life: once the key is revoked, the
    peer's next access through it fails."""
    node_guid: int
    gid: bytes  # 16 raw bytes, network order
    port: int
    key_bounds: str  # "key", "cut", "attachment" or "unknown" (docs/key_bounds.md)
    rkey: int
    addr: int
    length: int
    access: int  # REMOTE_* bits only
    endpoint: "QpAddress | None" = None

    def _c(self):
        if len(self.gid) != 16:
            raise ValueError("a GID is 16 bytes")
        if self.key_bounds not in _KEY_BOUNDS_VALUES:
            raise ValueError(f"key_bounds must be one of {sorted(_KEY_BOUNDS_VALUES)}")
        d = _Descriptor()
        d.node_guid = self.node_guid
        d.gid = (ctypes.c_uint8 * 16)(*self.gid)
        d.port = self.port
        d.key_bounds = _KEY_BOUNDS_VALUES[self.key_bounds]
        d.rkey = self.rkey
        d.addr = self.addr
        d.length = self.length
        d.access = self.access
        if self.endpoint is not None:
            d.has_endpoint = 1
            d.endpoint = self.endpoint._c()
        return d

    @staticmethod
    def _from_c(d):
        return Descriptor(d.node_guid, bytes(d.gid), d.port,
                          _KEY_BOUNDS_NAMES.get(d.key_bounds, "unknown"), d.rkey, d.addr,
                          d.length, d.access,
                          _qp_from_c(d.endpoint) if d.has_endpoint else None)

    def pack(self) -> bytes:
        buf = (ctypes.c_uint8 * DESCRIPTOR_MAX_BYTES)()
        n = ctypes.c_size_t()
        _check(_lib.regcache_descriptor_pack(ctypes.byref(self._c()), buf, len(buf),
                                             ctypes.byref(n)))
        return bytes(buf[:n.value])

    @staticmethod
    def unpack(data: bytes) -> "Descriptor":
        data = bytes(data)
        d = _Descriptor()
        _check(_lib.regcache_descriptor_unpack(data, len(data), ctypes.byref(d)))
        return Descriptor._from_c(d)

    def to_text(self) -> str:
        buf = ctypes.create_string_buffer(DESCRIPTOR_MAX_TEXT)
        _check(_lib.regcache_descriptor_to_text(ctypes.byref(self._c()), buf, len(buf)))
        return buf.value.decode()

    @staticmethod
    def from_text(text: str) -> "Descriptor":
        d = _Descriptor()
        _check(_lib.regcache_descriptor_from_text(text.encode(), ctypes.byref(d)))
        return Descriptor._from_c(d)


@dataclass(frozen=True)
class Key:
    """A key grant; hold it until Client.release."""
    handle: int
    lkey: int
    rkey: int
    va: int
    length: int
    access: int
    hit: bool
    same_key: bool = False  # reregister: the key (and rkey) were kept


@dataclass(frozen=True)
class KeyInfo:
    handle: int
    key: int
    access: int
    va: int
    length: int
    holders: int
    revoked: bool
    is_window: bool
    parent: int
    key_state: str


@dataclass(frozen=True)
class Usage:
    live_registrations: int
    revoked_held: int
    cached_unreferenced: int
    backings: int
    backed_bytes: int
    pool_outstanding: int
    pool_total: int


def _candidates():
    """Where libregcache.so is looked for, in order: $REGCACHE_LIB; where `cmake --install` put
    it (regcache/_installed.py, written by the install); next to this package; the
    build folders of the source tree this module sits in (client/python/regcache); the loader's
    own search path (LD_LIBRARY_PATH, ldconfig)."""
    env = os.environ.get("REGCACHE_LIB")
    if env:
        yield env
    try:  # written by `cmake --install` next to the installed package: the installed library
        from . import _installed
        yield _installed.LIBRARY
    except ImportError:
        pass
    here = pathlib.Path(__file__).resolve().parent
    yield str(here / "libregcache.so")
    root = here.parents[2]
    for preset in ("dev", "release", "clang", "asan", "tsan"):
        yield str(root / "build" / preset / "client" / "libregcache.so")
    yield ctypes.util.find_library("regcache") or "libregcache.so.0"


def _load_library():
    errors = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
            if os.environ.get("REGCACHE_LIB") == path:
                break  # an explicit choice that fails is an error, not a hint to look elsewhere
    raise ImportError("regcache: cannot load libregcache.so (set REGCACHE_LIB): " +
                      "; ".join(errors or ["not found"]))


def _declare(lib):
    c_client = ctypes.c_void_p
    u64, u32, cint = ctypes.c_uint64, ctypes.c_uint32, ctypes.c_int
    P = ctypes.POINTER
    signatures = {
        "regcache_last_error": (ctypes.c_char_p, []),
        "regcache_last_error_reason": (ctypes.c_char_p, []),
        "regcache_code_name": (ctypes.c_char_p, [cint]),
        "regcache_connect": (cint, [ctypes.c_char_p, P(_Options), P(c_client)]),
        "regcache_connect_device": (cint, [ctypes.c_char_p, P(_Options), ctypes.c_char_p,
                                           P(c_client)]),
        "regcache_connect_ex": (cint, [ctypes.c_char_p, P(_Options), ctypes.c_char_p,
                                       ctypes.c_uint32, P(c_client)]),
        "regcache_device": (cint, [c_client, P(_Device)]),
        "regcache_close": (None, [c_client]),
        "regcache_session_id": (u64, [c_client]),
        "regcache_allocate": (cint, [c_client, u64, cint, cint, P(_Memory)]),
        "regcache_attach_fd": (cint, [c_client, cint, u64, u64, cint, P(_Memory)]),
        "regcache_attach_dmabuf": (cint, [c_client, cint, u64, u64, ctypes.c_void_p, P(_Memory)]),
        "regcache_detach": (cint, [c_client, P(_Memory)]),
        "regcache_import_pd": (cint, [c_client, P(ctypes.c_void_p), P(ctypes.c_void_p)]),
        "regcache_attach_region": (cint, [c_client, ctypes.c_void_p, ctypes.c_void_p, u64, u32,
                                          P(_Memory)]),
        "regcache_endpoint_create": (cint, [c_client, P(_QpAddress), u32, P(_Endpoint)]),
        "regcache_endpoint_destroy": (cint, [c_client, u64]),
        "regcache_describe_key": (cint, [c_client, P(_Key), P(_Endpoint), P(_Descriptor)]),
        "regcache_descriptor_pack": (cint, [P(_Descriptor), ctypes.c_void_p, ctypes.c_size_t,
                                            P(ctypes.c_size_t)]),
        "regcache_descriptor_unpack": (cint, [ctypes.c_char_p, ctypes.c_size_t,
                                              P(_Descriptor)]),
        "regcache_descriptor_to_text": (cint, [P(_Descriptor), ctypes.c_char_p,
                                               ctypes.c_size_t]),
        "regcache_descriptor_from_text": (cint, [ctypes.c_char_p, P(_Descriptor)]),
        "regcache_sim_peer_write": (cint, [c_client, P(_Descriptor), P(_QpAddress), u64,
                                           ctypes.c_char_p, ctypes.c_size_t]),
        "regcache_sim_peer_read": (cint, [c_client, P(_Descriptor), P(_QpAddress), u64,
                                          ctypes.c_void_p, ctypes.c_size_t]),
        "regcache_register": (cint, [c_client, ctypes.c_void_p, u64, u32, u32, P(_Key)]),
        "regcache_window": (cint, [c_client, u64, u64, u64, u32, P(_Key)]),
        "regcache_release": (cint, [c_client, u64]),
        "regcache_invalidate": (cint, [c_client, u64]),
        "regcache_query": (cint, [c_client, u64, P(_KeyInfo)]),
        "regcache_prefetch": (cint, [c_client, ctypes.c_void_p, u64, cint, u32]),
        "regcache_usage": (cint, [c_client, P(_Usage)]),
        "regcache_reregister": (cint, [c_client, u64, ctypes.c_void_p, u64, u32, P(_Key)]),
        "regcache_register_batch": (cint, [c_client, P(_RegisterItem), ctypes.c_size_t,
                                           P(_Key), P(cint)]),
        "regcache_release_batch": (cint, [c_client, P(u64), ctypes.c_size_t, P(cint)]),
        "regcache_set_revocation_callback": (cint, [c_client, _RevocationFn, ctypes.c_void_p]),
    }
    for name, (restype, argtypes) in signatures.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


_lib = _declare(_load_library())
library_path = _lib._name


def _check(code):
    if code != OK:
        raise RegcacheError(code, _lib.regcache_last_error().decode(errors="replace"),
                            _lib.regcache_last_error_reason().decode(errors="replace"))


def _item_error(i, code):
    name = _lib.regcache_code_name(code).decode()
    return RegcacheError(code, f"batch item {i} failed: {name}")


def _key(k):
    return Key(k.handle, k.lkey, k.rkey, k.va, k.length, k.access, bool(k.hit),
               bool(k.same_key))


def _address(addr):
    """An int address, None (NULL: refused by the library), a Memory (its start) or a ctypes
    object."""
    if addr is None:
        return None
    if isinstance(addr, Memory):
        return addr.data
    if isinstance(addr, int):
        return addr
    return ctypes.addressof(addr)


def _fd(f):
    """A descriptor from an int or from a file object (anything with fileno())."""
    return f.fileno() if hasattr(f, "fileno") else int(f)


def buffer_address(obj):
    """The address and length of a buffer-protocol object's memory (a memoryview, bytearray,
    mmap, ctypes array, or a NumPy array through __array_interface__), without copying it.
    The memory must be C-contiguous; a read-only buffer needs __array_interface__."""
    iface = getattr(obj, "__array_interface__", None)
    view = memoryview(obj)
    if not view.c_contiguous:
        raise ValueError("the buffer is not contiguous: register a contiguous one")
    if iface is not None:
        return int(iface["data"][0]), view.nbytes
    if view.readonly:
        raise ValueError("a read-only buffer without __array_interface__ has no address here")
    if view.nbytes == 0:
        raise ValueError("an empty buffer")
    return ctypes.addressof(ctypes.c_char.from_buffer(view.cast("B"))), view.nbytes


def _handle(key):
    return key.handle if isinstance(key, Key) else int(key)


_CONNECT_OWN_DEVICE_CONTEXT = 1  # REGCACHE_CONNECT_OWN_DEVICE_CONTEXT


class Client:
    """One session with regcached (a connection). Use it as a context manager, or close()."""

    def __init__(self, socket_dir=None, call_timeout_ms=0, tcp_port=0, fast_path=True,
                 client_cache=True, device=None, own_device_context=False):
        """socket_dir: the daemon's socket directory (None: REGCACHE_SOCKET_DIR when it is set
        and not empty, else /run/regcache); fast_path: key calls over the shared-memory rings; client_cache: a register that a
        grant this process holds covers is answered here, without IPC (both default on);
        device: the daemon's device the session lives on, by name (None: its first);
        own_device_context: the session gets a device context of its own, which import_pd
        imports (regcached --allow_pd_export; docs/client_memory.md)."""
        options = _Options(call_timeout_ms, tcp_port, 0 if fast_path else 1,
                           0 if client_cache else 1)
        handle = ctypes.c_void_p()
        flags = _CONNECT_OWN_DEVICE_CONTEXT if own_device_context else 0
        where = None if socket_dir is None else os.fsencode(socket_dir)
        _check(_lib.regcache_connect_ex(where, ctypes.byref(options),
                                        None if device is None else device.encode(), flags,
                                        ctypes.byref(handle)))
        self._handle = handle
        self._close_lock = threading.Lock()
        self._on_revoke = None  # the revocation callback's ctypes function (on_revoke)
        self._on_revoke_kept = []  # and every earlier one: the library may call it once more

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        # A client dropped without close(): end its session. At interpreter exit the module's
        # globals may already be gone; the process's exit ends the session then anyway.
        try:
            if getattr(self, "_handle", None) is not None:
                self.close()
        except Exception:
            pass

    def close(self) -> None:
        """Closes the session: the daemon invalidates every key of it; memory is unmapped."""
        with self._close_lock:
            handle, self._handle = self._handle, None
        if handle is not None:
            _lib.regcache_close(handle)  # joins the library's threads: no callback after this
            self._on_revoke = None
            self._on_revoke_kept = []

    def _h(self):
        h = self._handle
        if h is None:
            raise RegcacheError(FAILED_PRECONDITION, "client closed")
        return h

    @property
    def session_id(self) -> int:
        return _lib.regcache_session_id(self._h())

    @property
    def device(self) -> Device:
        """The device this session lives on (a Device)."""
        d = _Device()
        _check(_lib.regcache_device(self._h(), ctypes.byref(d)))
        bounds = _KEY_BOUNDS_NAMES.get(d.key_bounds, "unknown")
        return Device(d.index, d.name.decode(), d.node_guid, d.port, bytes(d.gid), bounds)

    # --- Memory ---
    def allocate(self, length: int, hugetlb: bool = False, on_demand: bool = False) -> Memory:
        m = _Memory()
        _check(_lib.regcache_allocate(self._h(), length, int(hugetlb), int(on_demand),
                                      ctypes.byref(m)))
        return Memory(m.id, m.data, m.length)

    def attach_fd(self, fd, offset, length, on_demand=False):
        """Attaches [offset, offset+length) of a memfd (made with MFD_ALLOW_SEALING), an int or
        a file object; the descriptor stays the caller's."""
        m = _Memory()
        _check(_lib.regcache_attach_fd(self._h(), _fd(fd), offset, length, int(on_demand),
                                       ctypes.byref(m)))
        return Memory(m.id, m.data, m.length)

    def attach_dmabuf(self, fd, offset, length, va):
        """Attaches [offset, offset+length) of a dma-buf (e.g. a GPU buffer its driver exported)
        with keys speaking the addresses [va, va+length); nothing is mapped. The fd stays the
        caller's."""
        m = _Memory()
        _check(_lib.regcache_attach_dmabuf(self._h(), _fd(fd), offset, length,
                                           ctypes.c_void_p(va), ctypes.byref(m)))
        return Memory(m.id, m.data, m.length)

    def import_pd(self):
        """Imports the session's PD here (docs/client_memory.md): (ibv_context*, ibv_pd*) as
        ints, for a verbs binding such as pyverbs. Valid until close."""
        ctx, pd = ctypes.c_void_p(), ctypes.c_void_p()
        _check(_lib.regcache_import_pd(self._h(), ctypes.byref(ctx), ctypes.byref(pd)))
        return ctx.value, pd.value

    def attach_region(self, mr, addr=None, length=0, access=None):
        """Attaches [addr, addr+length) of a region this process registered in the imported PD
        (`mr`: the ibv_mr* as an int; addr None: all of it)."""
        if access is None:
            access = LOCAL_READ | LOCAL_WRITE | REMOTE_READ | REMOTE_WRITE | REMOTE_ATOMIC
        m = _Memory()
        _check(_lib.regcache_attach_region(self._h(), ctypes.c_void_p(mr), _address(addr),
                                           length, access, ctypes.byref(m)))
        return Memory(m.id, m.data, m.length)

    def detach(self, memory: Memory) -> None:
        m = _Memory(memory.id, memory.data, memory.length)
        _check(_lib.regcache_detach(self._h(), ctypes.byref(m)))

    # --- Keys ---
    def register(self, addr, length: int, access: int, prefetch: int = PREFETCH_NONE) -> Key:
        k = _Key()
        _check(_lib.regcache_register(self._h(), _address(addr), length, access, prefetch,
                                      ctypes.byref(k)))
        return _key(k)

    def register_buffer(self, obj, access, prefetch=PREFETCH_NONE):
        """A key over a buffer-protocol object's memory (buffer_address), which must lie in
        memory attached to this session (e.g. a slice of Memory.buffer(), or a NumPy array
        built over it): nothing is copied."""
        addr, length = buffer_address(obj)
        return self.register(addr, length, access, prefetch)

    # --- Target endpoints (docs/endpoints.md) ---
    def create_endpoint(self, peer: QpAddress, access: Optional[int] = None) -> Endpoint:
        """An RC queue pair of the daemon's in this session's PD, connected to `peer` (a
        QpAddress); hand the returned Endpoint.local to the peer."""
        if access is None:
            access = REMOTE_READ | REMOTE_WRITE | REMOTE_ATOMIC
        e = _Endpoint()
        _check(_lib.regcache_endpoint_create(self._h(), ctypes.byref(peer._c()), access,
                                             ctypes.byref(e)))
        return Endpoint(e.id, _qp_from_c(e.local), e.access)

    def describe(self, key, endpoint=None) -> Descriptor:
        """The Descriptor of `key` (a Key of this session) for a remote peer, with `endpoint`'s
        address (an Endpoint of this session) when the peer uses the key through it: the
        access is then what both the key and the endpoint accept. INVALID_ARGUMENT for a key
        with no remote right."""
        k = _Key(key.handle, key.lkey, key.rkey, key.va, key.length, key.access, int(key.hit),
                 int(key.same_key), 0)
        e = None
        if endpoint is not None:
            e = _Endpoint(endpoint.id, endpoint.local._c(), endpoint.access, 0)
        d = _Descriptor()
        _check(_lib.regcache_describe_key(self._h(), ctypes.byref(k),
                                          ctypes.byref(e) if e is not None else None,
                                          ctypes.byref(d)))
        return Descriptor._from_c(d)

    # --- The simulated peer (a daemon on --device=sim): docs/integrating.md ---
    def sim_peer_write(self, descriptor: Descriptor, peer_qp: QpAddress, addr: int,
                       data: bytes) -> None:
        """As the remote node holding queue pair `peer_qp` (the address it named to the key's
        owner) connected to descriptor.endpoint, RDMA-writes `data` at `addr` with the
        descriptor's rkey; this session stands in for that node's NIC. Raises RegcacheError
        with the device's answer when the access fails (a revoked key, say)."""
        data = bytes(data)
        _check(_lib.regcache_sim_peer_write(self._h(), ctypes.byref(descriptor._c()),
                                            ctypes.byref(peer_qp._c()), addr, data, len(data)))

    def sim_peer_read(self, descriptor: Descriptor, peer_qp: QpAddress, addr: int,
                      length: int) -> bytes:
        """The read of sim_peer_write: `length` bytes (at most 1 MiB) at `addr`."""
        buf = ctypes.create_string_buffer(length)
        _check(_lib.regcache_sim_peer_read(self._h(), ctypes.byref(descriptor._c()),
                                           ctypes.byref(peer_qp._c()), addr, buf, length))
        return buf.raw

    def destroy_endpoint(self, endpoint) -> None:
        _check(_lib.regcache_endpoint_destroy(
            self._h(), endpoint.id if isinstance(endpoint, Endpoint) else int(endpoint)))

    def reregister(self, key, addr, length, access):
        """The kernel's rereg_mr: trades this hold on `key` for one on the new range and rights;
        the result's same_key says whether the rkey was kept."""
        k = _Key()
        _check(_lib.regcache_reregister(self._h(), _handle(key), _address(addr), length, access,
                                        ctypes.byref(k)))
        return _key(k)

    def register_batch(self, items):
        """Registers [(addr, length, access[, prefetch]), ...] in one round trip. Returns one
        result per item, in order: a Key, or the RegcacheError of that item alone."""
        items = list(items)
        n = len(items)
        c_items = (_RegisterItem * max(n, 1))()
        for i, it in enumerate(items):
            addr, length, access = it[0], it[1], it[2]
            prefetch = it[3] if len(it) > 3 else PREFETCH_NONE
            c_items[i] = _RegisterItem(_address(addr), length, access, prefetch)
        keys = (_Key * max(n, 1))()
        codes = (ctypes.c_int * max(n, 1))()
        _check(_lib.regcache_register_batch(self._h(), c_items, n, keys, codes))
        return [_key(keys[i]) if codes[i] == OK else _item_error(i, codes[i]) for i in range(n)]

    def release_batch(self, keys):
        """Releases many keys in one round trip; one code per key (OK or the error code)."""
        keys = list(keys)
        n = len(keys)
        handles = (ctypes.c_uint64 * max(n, 1))(*[_handle(k) for k in keys])
        codes = (ctypes.c_int * max(n, 1))()
        _check(_lib.regcache_release_batch(self._h(), handles, n, codes))
        return [codes[i] for i in range(n)]

    def registered(self, addr, length, access, prefetch=PREFETCH_NONE):
        """register() as a context manager: the key is released when the block ends."""
        return _HeldKey(self, self.register(addr, length, access, prefetch))

    def window(self, parent, offset: int, length: int, access: int) -> Key:
        k = _Key()
        _check(_lib.regcache_window(self._h(), _handle(parent), offset, length, access,
                                    ctypes.byref(k)))
        return _key(k)

    def release(self, key) -> None:
        _check(_lib.regcache_release(self._h(), _handle(key)))

    def invalidate(self, key) -> None:
        _check(_lib.regcache_invalidate(self._h(), _handle(key)))

    def query(self, key) -> KeyInfo:
        i = _KeyInfo()
        _check(_lib.regcache_query(self._h(), _handle(key), ctypes.byref(i)))
        return KeyInfo(i.handle, i.key, i.access, i.va, i.length, i.holders, bool(i.revoked),
                       bool(i.is_window), i.parent, i.key_state.decode(errors="replace"))

    def prefetch(self, addr, length, write=False, mode=PREFETCH_SYNC):
        _check(_lib.regcache_prefetch(self._h(), _address(addr), length, int(write), mode))

    def on_revoke(self, callback: Optional[Callable[[Revocation], None]]) -> None:
        """Calls callback(Revocation) for every key this process holds through the client cache
        that the daemon revoked (another thread's invalidate, an admin, detach, reclaim), after
        the library stopped handing it out; None removes it. Needs the fast path and the client
        cache (the defaults). Threading: the callback runs on a thread of the library (holding
        the GIL, as ctypes callbacks do), one revocation at a time; it may call this client's
        methods (release the revoked key, say) but not close(), and later revocations wait
        while it runs. An exception it raises is printed to stderr and otherwise ignored."""
        if callback is None:
            _check(_lib.regcache_set_revocation_callback(self._h(), _RevocationFn(), None))
            return

        def trampoline(revocation, _user_data):
            r = revocation.contents
            try:
                reason = RevocationReason(r.reason)
            except ValueError:
                reason = RevocationReason.UNKNOWN
            try:
                callback(Revocation(r.handle, r.key, reason))
            except BaseException:  # noqa: B036 - nothing may unwind into the C library
                traceback.print_exc(file=sys.stderr)

        fn = _RevocationFn(trampoline)
        _check(_lib.regcache_set_revocation_callback(self._h(), fn, None))
        # Kept until close(): the library may still call the previous one once, or this one.
        self._on_revoke_kept.append(fn)
        self._on_revoke = fn

    def usage(self) -> Usage:
        u = _Usage()
        _check(_lib.regcache_usage(self._h(), ctypes.byref(u)))
        return Usage(*(getattr(u, f) for f, _ in _Usage._fields_))


class _HeldKey:
    def __init__(self, client, key):
        self._client = client
        self.key = key

    def __enter__(self):
        return self.key

    def __exit__(self, *exc):
        self._client.release(self.key)
        return False
