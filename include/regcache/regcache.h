/* regcache.h — the C ABI of the regcached client, for C programs and FFI users (Python's ctypes,
 * Rust, Go, ...). Plain C11 that also compiles as C++; no C++ type crosses it. It wraps the C++
 * client of "regcache/client.h" (regcache::api::Client), so every call has the same meaning,
 * errors and thread safety; docs/prm.md describes the operations themselves.
 *
 *   regcache_client_t* c;
 *   if (regcache_connect("/run/regcache", NULL, &c) != REGCACHE_OK) {
 *     fprintf(stderr, "%s\n", regcache_last_error());
 *   }
 *   regcache_memory_t m;  regcache_allocate(c, 1 << 20, 0, 0, &m);  // mapped here, attached
 *   regcache_key_t k;     regcache_register(c, m.data, 4096, REGCACHE_REMOTE_WRITE | ...,
 *                                           REGCACHE_PREFETCH_NONE, &k);
 *   ... hand k.rkey and the address to a peer; k.lkey for local SGEs ...
 *   regcache_release(c, k.handle);
 *   regcache_close(c);
 *
 * Link with -lregcache (the shared library libregcache.so, which exports exactly the functions
 * declared here), or with the static regcache_api target from C++.
 *
 * Errors: every function that can fail returns a regcache_code_t — REGCACHE_OK (0) or one of
 * the canonical status codes (the numbers of absl::StatusCode and gRPC). The message of the
 * calling thread's last call is regcache_last_error(): "" after a success, the daemon's (or
 * this library's) explanation after a failure. Output structs are written only on success.
 * Every pointer argument is checked: NULL where an object is required is
 * REGCACHE_INVALID_ARGUMENT naming the argument, never a crash.
 *
 * Thread safety: all functions may be called concurrently on one client, except regcache_close,
 * which must be the last call on it (a closed client is freed: using it again is undefined).
 */
#ifndef REGCACHE_REGCACHE_H_
#define REGCACHE_REGCACHE_H_

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define REGCACHE_API __attribute__((visibility("default")))
#else
#define REGCACHE_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The canonical status codes (absl::StatusCode, gRPC's numbering). */
typedef enum regcache_code {
  REGCACHE_OK = 0,
  REGCACHE_CANCELLED = 1,
  REGCACHE_UNKNOWN = 2,
  REGCACHE_INVALID_ARGUMENT = 3,
  REGCACHE_DEADLINE_EXCEEDED = 4,
  REGCACHE_NOT_FOUND = 5,
  REGCACHE_ALREADY_EXISTS = 6,
  REGCACHE_PERMISSION_DENIED = 7,
  REGCACHE_RESOURCE_EXHAUSTED = 8,
  REGCACHE_FAILED_PRECONDITION = 9,
  REGCACHE_ABORTED = 10,
  REGCACHE_OUT_OF_RANGE = 11,
  REGCACHE_UNIMPLEMENTED = 12,
  REGCACHE_INTERNAL = 13,
  REGCACHE_UNAVAILABLE = 14,
  REGCACHE_DATA_LOSS = 15,
  REGCACHE_UNAUTHENTICATED = 16
} regcache_code_t;

/* Access bits of a registration (the values of regcache::api::AccessBits). */
#define REGCACHE_LOCAL_READ (1u << 0)
#define REGCACHE_LOCAL_WRITE (1u << 1)
#define REGCACHE_REMOTE_READ (1u << 2)
#define REGCACHE_REMOTE_WRITE (1u << 3)
#define REGCACHE_REMOTE_ATOMIC (1u << 4)

/* Prefetch of on-demand memory (the values of regcache::api::PrefetchMode). Functions take it as
 * a uint32_t, so that a value outside the enum is refused with REGCACHE_INVALID_ARGUMENT rather
 * than being undefined where the library is C++. */
typedef enum regcache_prefetch {
  REGCACHE_PREFETCH_NONE = 0, /* translations appear on first access */
  REGCACHE_PREFETCH_SYNC = 1, /* present before the call returns */
  REGCACHE_PREFETCH_ASYNC = 2 /* queued to the daemon's fault servicer */
} regcache_prefetch_t;

/* A connection to regcached: one session. Opaque. */
typedef struct regcache_client regcache_client_t;

/* Connection options. All-zero (or a NULL pointer) means the defaults. */
typedef struct regcache_options {
  uint32_t call_timeout_ms; /* deadline of every call; 0: 10 000 ms */
  uint16_t tcp_port;        /* nonzero: gRPC over 127.0.0.1:<port> instead of the unix socket */
  uint8_t no_fast_path;     /* nonzero: every call over gRPC, none over the shared-memory rings */
  uint8_t no_client_cache;  /* nonzero: no hit answered in this process (every call goes to the
                               daemon); see ClientOptions::client_cache in regcache/client.h */
} regcache_options_t;

/* regcache_device_t::key_bounds (docs/key_bounds.md). With KEY and CUT a peer holding a key
 * reaches only the key's own range; with ATTACHMENT it reaches the whole attached memory the key
 * lies in (Soft-RoCE, unless the daemon runs with --strict_key_bounds). */
enum {
  REGCACHE_KEY_BOUNDS_UNKNOWN = 0,
  REGCACHE_KEY_BOUNDS_KEY = 1, /* the device checks every access against the key's range */
  REGCACHE_KEY_BOUNDS_CUT = 2, /* each key has a memory region of its own, cut at its edges */
  REGCACHE_KEY_BOUNDS_ATTACHMENT = 3, /* only the attachment's range is enforced */
};

/* The NIC a session lives on (regcache_device): every key of the session belongs to it, so a
 * process pairs the keys with queue pairs it opened on the same device (same GUID / GID). */
typedef struct regcache_device {
  uint32_t index;     /* its place in the daemon's --device list */
  uint8_t port;       /* the port the GID belongs to (1-based) */
  uint8_t key_bounds; /* REGCACHE_KEY_BOUNDS_*: what confines a peer holding one of its keys */
  uint8_t reserved[2];
  uint64_t node_guid; /* host byte order, as be64toh(ibv_device_attr.node_guid) */
  uint8_t gid[16];    /* the port's GID, network order */
  char name[65];      /* NUL-terminated, e.g. "mlx5_1" */
} regcache_device_t;

/* Memory attached to the session and mapped in this process. */
typedef struct regcache_memory {
  uint64_t id;
  void* data; /* this process's mapping; registrations use these addresses */
  uint64_t length;
} regcache_memory_t;

/* A key grant: hold it until regcache_release. */
typedef struct regcache_key {
  uint64_t handle;
  uint32_t lkey;
  uint32_t rkey;
  uint64_t va; /* the covering registration's range */
  uint64_t length;
  uint32_t access;
  uint32_t hit;      /* 1: answered from a cache (the daemon's or this process's); 0: new */
  uint32_t same_key; /* regcache_reregister: 1 when the key (and rkey) were kept */
  uint32_t reserved;
} regcache_key_t;

/* One range of regcache_register_batch. */
typedef struct regcache_register_item {
  const void* addr;
  uint64_t length;
  uint32_t access;
  uint32_t prefetch; /* a regcache_prefetch_t value */
} regcache_register_item_t;

/* Most items one batch may carry (the C++ client's kMaxBatchItems). */
#define REGCACHE_MAX_BATCH_ITEMS 1024

/* What regcache_query reports about a held key. */
typedef struct regcache_key_info {
  uint64_t handle;
  uint32_t key;
  uint32_t access;
  uint64_t va;
  uint64_t length;
  uint32_t holders;
  uint32_t revoked;   /* 1: invalidated; the handle still needs its release */
  uint32_t is_window; /* 1: a window of `parent` */
  uint32_t reserved;
  uint64_t parent;
  char key_state[32]; /* the key's lifecycle state, NUL-terminated (truncated if longer) */
} regcache_key_info_t;

/* The session's own usage (what the daemon counts against its quotas). */
typedef struct regcache_usage {
  uint64_t live_registrations;
  uint64_t revoked_held;
  uint64_t cached_unreferenced;
  uint64_t backings; /* memory attached to the session */
  uint64_t backed_bytes;
  uint64_t pool_outstanding;
  uint64_t pool_total;
} regcache_usage_t;

/* One side of an RC connection (docs/endpoints.md): what the other side connects its queue pair
 * to. The C++ client's regcache::api::RemoteQp. */
typedef struct regcache_qp_address {
  uint32_t qpn;    /* queue pair number, 1..2^24-1 */
  uint32_t psn;    /* first packet sequence number this side sends, < 2^24 */
  uint8_t gid[16]; /* the port GID, raw bytes in network order (RoCE needs one) */
  uint16_t lid;    /* InfiniBand only; 0 on RoCE */
  uint16_t reserved;
  uint32_t mtu; /* 256, 512, 1024, 2048 or 4096; 0 in a request: the daemon port's active MTU */
} regcache_qp_address_t;

/* A target endpoint of the session: an RC queue pair of the daemon's in the session's PD. */
typedef struct regcache_endpoint {
  uint64_t id;                 /* the session's own id, from 1 */
  regcache_qp_address_t local; /* the daemon's queue pair: hand it to the peer */
  uint32_t access;             /* remote operations accepted (REGCACHE_REMOTE_*) */
  uint32_t reserved;
} regcache_endpoint_t;

/* The message of this thread's last call into this library: "" after a success. The pointer
 * stays valid until this thread's next call into the library. Never NULL. */
REGCACHE_API const char* regcache_last_error(void);
/* The stable reason of the calling thread's last error, when the daemon gave one (docs/api.md:
 * "KEY_QUOTA_EXCEEDED", "MEMORY_QUOTA_EXCEEDED", ...); "" otherwise. Valid until the thread's
 * next call. */
REGCACHE_API const char* regcache_last_error_reason(void);

/* "INVALID_ARGUMENT" for REGCACHE_INVALID_ARGUMENT, ...; "UNKNOWN_CODE" for anything else. */
REGCACHE_API const char* regcache_code_name(int code);

/* Sets this thread's last error and returns `code`: for libraries layered on this ABI
 * (regcache_alloc), so their errors read like the client's. `message` NULL means "". */
REGCACHE_API regcache_code_t regcache_set_last_error(regcache_code_t code, const char* message);

/* Opens a session with the daemon listening in `socket_dir` (NULL or "": REGCACHE_SOCKET_DIR when
 * it is set and not empty, else /run/regcache). `options` may be NULL. REGCACHE_UNAVAILABLE when
 * no daemon listens there; REGCACHE_PERMISSION_DENIED when this process's credentials are not
 * on its allow-list. */
REGCACHE_API regcache_code_t regcache_connect(const char* socket_dir,
                                              const regcache_options_t* options,
                                              regcache_client_t** out);

/* regcache_connect with the session on the daemon's device named `device` (a daemon may serve
 * several NICs; NULL or "": its first device). REGCACHE_NOT_FOUND for a device the daemon does not
 * serve (the last error lists those it does). */
REGCACHE_API regcache_code_t regcache_connect_device(const char* socket_dir,
                                                     const regcache_options_t* options,
                                                     const char* device, regcache_client_t** out);

/* regcache_connect_ex flags. */
enum {
  /* The session gets a device context of its own in the daemon (--allow_pd_export), which
   * regcache_import_pd imports; see ClientOptions::own_device_context in regcache/client.h.
   * REGCACHE_PERMISSION_DENIED where the daemon does not allow it, REGCACHE_UNIMPLEMENTED on a
   * device that cannot export a PD. */
  REGCACHE_CONNECT_OWN_DEVICE_CONTEXT = 1,
};

/* regcache_connect_device with REGCACHE_CONNECT_* `flags` (0: as regcache_connect_device).
 * REGCACHE_INVALID_ARGUMENT for an unknown flag. */
REGCACHE_API regcache_code_t regcache_connect_ex(const char* socket_dir,
                                                 const regcache_options_t* options,
                                                 const char* device, uint32_t flags,
                                                 regcache_client_t** out);

/* The device this client's session lives on. REGCACHE_INVALID_ARGUMENT for NULL arguments. */
REGCACHE_API regcache_code_t regcache_device(const regcache_client_t* client,
                                             regcache_device_t* out);

/* Closes the session (the daemon invalidates every key of it), unmaps the client's memory and
 * frees `client`. NULL is a no-op. */
REGCACHE_API void regcache_close(regcache_client_t* client);

/* The daemon's id of this session; 0 for NULL. */
REGCACHE_API uint64_t regcache_session_id(const regcache_client_t* client);

/* Daemon-allocated shareable memory of `length` bytes (a multiple of the page size; 2 MiB with
 * `hugetlb`), mapped here and attached. `on_demand` nonzero: registrations over it fault
 * translations in (ODP). REGCACHE_INVALID_ARGUMENT for length 0 or unaligned;
 * REGCACHE_RESOURCE_EXHAUSTED beyond the session's quota. */
REGCACHE_API regcache_code_t regcache_allocate(regcache_client_t* client, uint64_t length,
                                               int hugetlb, int on_demand, regcache_memory_t* out);

/* Attaches [offset, offset + length) of the caller's memfd `fd` (created with
 * MFD_ALLOW_SEALING; not closed: the daemon keeps its own reference) and maps it here. */
REGCACHE_API regcache_code_t regcache_attach_fd(regcache_client_t* client, int fd, uint64_t offset,
                                                uint64_t length, int on_demand,
                                                regcache_memory_t* out);

/* Attaches [offset, offset + length) of dma-buf `fd` (memory another driver exported, e.g. a GPU
 * buffer; not closed: the daemon keeps its own reference) with keys speaking the addresses
 * [va, va + length). Nothing is mapped: the device registers it by descriptor, and out->data
 * is `va`. REGCACHE_INVALID_ARGUMENT for an fd that is not a dma-buf, a range outside it or va
 * NULL; REGCACHE_UNIMPLEMENTED where the daemon's device cannot register dma-bufs. */
REGCACHE_API regcache_code_t regcache_attach_dmabuf(regcache_client_t* client, int fd,
                                                    uint64_t offset, uint64_t length,
                                                    const void* va, regcache_memory_t* out);

/* Detaches the memory (every key over it is invalidated) and unmaps it here. */
REGCACHE_API regcache_code_t regcache_detach(regcache_client_t* client,
                                             const regcache_memory_t* memory);

/* This session's PD in this process, and memory this process registered in it
 * (docs/client_memory.md; regcache::api::Client::ImportPd / AttachRegion). The libibverbs types
 * are only declared here: include <infiniband/verbs.h> to use them. */
struct ibv_context;
struct ibv_pd;
struct ibv_mr;

/* Imports the session's PD (a session opened with REGCACHE_CONNECT_OWN_DEVICE_CONTEXT):
 * *context is the session's own device context imported here (ibv_import_device), *pd the
 * session's PD in it (ibv_import_pd). Queue pairs and memory regions created in it are in the
 * session's PD. Once per client (later calls return the same); valid until regcache_close,
 * which unimports them: destroy what you created in them first. REGCACHE_UNIMPLEMENTED when
 * the daemon's device cannot export PDs; REGCACHE_PERMISSION_DENIED when the daemon does not
 * allow it (--allow_pd_export); REGCACHE_FAILED_PRECONDITION for a session without its own
 * device context. */
REGCACHE_API regcache_code_t regcache_import_pd(regcache_client_t* client,
                                                struct ibv_context** context, struct ibv_pd** pd);

/* Attaches [addr, addr + length) of `mr` (a region registered in the imported PD; addr NULL:
 * all of it) as memory of the session, with keys over it allowed at most `access`. The daemon
 * never touches the memory; regcache_detach or the session's end only forgets it: deregister
 * the region yourself afterwards. REGCACHE_OUT_OF_RANGE for a range outside the region,
 * REGCACHE_NOT_FOUND for a region the daemon's context does not have, REGCACHE_ALREADY_EXISTS
 * for one attached before. */
REGCACHE_API regcache_code_t regcache_attach_region(regcache_client_t* client,
                                                    const struct ibv_mr* mr, const void* addr,
                                                    uint64_t length, uint32_t access,
                                                    regcache_memory_t* out);

/* A key for [addr, addr + length) of attached memory with at least `access` (REGCACHE_*_READ
 * | ...). `prefetch` applies to on-demand memory only. REGCACHE_INVALID_ARGUMENT for NULL
 * addr or length 0; REGCACHE_OUT_OF_RANGE when attached memory does not cover the range. */
REGCACHE_API regcache_code_t regcache_register(regcache_client_t* client, const void* addr,
                                               uint64_t length, uint32_t access, uint32_t prefetch,
                                               regcache_key_t* out);

/* A window key over [offset, offset + length) of the held key `parent`, with at most its
 * access. */
REGCACHE_API regcache_code_t regcache_window(regcache_client_t* client, uint64_t parent,
                                             uint64_t offset, uint64_t length, uint32_t access,
                                             regcache_key_t* out);

/* The kernel's rereg_mr: trades this hold on `handle` for one on [addr, addr + length) with
 * `access`. When this process holds the key alone and the change only adds (a range that still
 * covers the old one, more rights), the key is rewritten in place and out->same_key is 1: the
 * rkey a peer holds keeps working. Anything that takes rights away gets a new key first. When
 * the daemon refused the call the caller keeps its old hold (possibly revoked: regcache_query
 * says). When the outcome is unknown (REGCACHE_DEADLINE_EXCEEDED, REGCACHE_CANCELLED,
 * REGCACHE_UNAVAILABLE) the daemon releases what the lost call made, and the old hold is gone
 * if the call ran, kept if it never did: regcache_query tells. */
REGCACHE_API regcache_code_t regcache_reregister(regcache_client_t* client, uint64_t handle,
                                                 const void* addr, uint64_t length, uint32_t access,
                                                 regcache_key_t* out);

/* Registers `count` ranges in one round trip. keys[i] and codes[i] are item i's result (keys[i]
 * is written only where codes[i] is REGCACHE_OK); each item fails alone. Returns REGCACHE_OK
 * when the batch ran (then regcache_last_error() names the first item that failed, if any), or
 * the code of what stopped it: NULL pointers, count 0 or above REGCACHE_MAX_BATCH_ITEMS, the
 * transport. */
REGCACHE_API regcache_code_t regcache_register_batch(regcache_client_t* client,
                                                     const regcache_register_item_t* items,
                                                     size_t count, regcache_key_t* keys,
                                                     int* codes);

/* Releases `count` handles in one round trip; codes[i] is handle i's result. Returns as
 * regcache_register_batch. */
REGCACHE_API regcache_code_t regcache_release_batch(regcache_client_t* client,
                                                    const uint64_t* handles, size_t count,
                                                    int* codes);

/* Gives back one hold of `handle`. REGCACHE_NOT_FOUND for a handle this session does not
 * hold. */
REGCACHE_API regcache_code_t regcache_release(regcache_client_t* client, uint64_t handle);

/* Revokes the key now (peers lose access); the handle still needs its release. */
REGCACHE_API regcache_code_t regcache_invalidate(regcache_client_t* client, uint64_t handle);

/* The state of a held key. */
REGCACHE_API regcache_code_t regcache_query(regcache_client_t* client, uint64_t handle,
                                            regcache_key_info_t* out);

/* Makes the translations of on-demand memory in [addr, addr + length) present (writable too
 * when `write` is nonzero), now (REGCACHE_PREFETCH_SYNC) or queued (REGCACHE_PREFETCH_ASYNC). */
REGCACHE_API regcache_code_t regcache_prefetch(regcache_client_t* client, const void* addr,
                                               uint64_t length, int write, uint32_t mode);

/* Asks the daemon for an RC queue pair in this session's PD connected to `peer` (the remote
 * node's queue pair), accepting the remote operations in `access` (a non-empty set of
 * REGCACHE_REMOTE_*). out->local is the daemon's address, for the peer to connect to; from then on
 * the peer's one-sided READ / WRITE / atomics reach this session's memory through its rkeys, with
 * no posting here, until regcache_endpoint_destroy or the end of the session. Each access is
 * checked against the rkey's rights, PD and range; which range, the key's own or its whole
 * attachment's, regcache_device_t::key_bounds says (docs/key_bounds.md).
 * REGCACHE_INVALID_ARGUMENT for a malformed address or access; REGCACHE_RESOURCE_EXHAUSTED past
 * the daemon's per-session limit; REGCACHE_UNIMPLEMENTED on a device without endpoints. */
REGCACHE_API regcache_code_t regcache_endpoint_create(regcache_client_t* client,
                                                      const regcache_qp_address_t* peer,
                                                      uint32_t access, regcache_endpoint_t* out);

/* Destroys the endpoint: the peer's accesses fail from now on. REGCACHE_NOT_FOUND for an id this
 * session does not hold. */
REGCACHE_API regcache_code_t regcache_endpoint_destroy(regcache_client_t* client, uint64_t id);

/* Why a key stopped working (the values of regcache::api::RevocationReason). */
enum {
  REGCACHE_REVOKED_INVALIDATED = 1,        /* regcache_invalidate, from any thread (or an admin) */
  REGCACHE_REVOKED_PARENT_INVALIDATED = 2, /* a window whose registration was invalidated */
  REGCACHE_REVOKED_MEMORY_DETACHED = 3,    /* the memory under it was detached */
  REGCACHE_REVOKED_REREGISTERED = 4,       /* a re-registration narrowed it */
  REGCACHE_REVOKED_RECLAIMED = 5,          /* the daemon took it back under key pressure */
  REGCACHE_REVOKED_UNKNOWN = 100,          /* the library lost track of events (fell behind) */
};

typedef struct regcache_revocation {
  uint64_t handle;
  uint32_t key;    /* 0 with REGCACHE_REVOKED_UNKNOWN */
  uint32_t reason; /* REGCACHE_REVOKED_* */
} regcache_revocation_t;

typedef void (*regcache_revocation_fn)(const regcache_revocation_t* revocation, void* user_data);

/* Calls `fn(revocation, user_data)` for every key this process holds through the client cache
 * that the daemon revoked, after the library stopped handing it out (Client::
 * SetRevocationCallback). Replaces the previous callback; `fn` NULL removes it. Needs the fast
 * path and the client cache (the default options); without them it is never called.
 * Threading: `fn` runs on one thread of the library, never the caller's, one revocation at a
 * time and in the order the daemon published them. It may call this library's functions on the
 * client (regcache_release of the revoked handle, say) except regcache_close; while it runs,
 * later revocations and the client cache's reclaim wait, so keep it short. After this function
 * returns, the previous callback may still be running, or about to run, once more: `user_data`
 * must stay valid until regcache_close. */
REGCACHE_API regcache_code_t regcache_set_revocation_callback(regcache_client_t* client,
                                                              regcache_revocation_fn fn,
                                                              void* user_data);

/* This session's usage as the daemon counts it. */
REGCACHE_API regcache_code_t regcache_usage(regcache_client_t* client, regcache_usage_t* out);

/* --- Peer descriptors (docs/descriptors.md; regcache/descriptor.h): what a remote peer needs to
 * use one of this session's keys, as a compact versioned byte string or its text form, for the
 * application to carry to the peer. These calls need no daemon (except
 * regcache_describe_key, which reads the client's device) and may be called from any thread. */

/* Largest packed descriptor (one with an endpoint); one without is 64 bytes. */
#define REGCACHE_DESCRIPTOR_MAX_BYTES 96
/* Largest text form, its NUL included: "rcd1:" and the bytes in unpadded base64url. */
#define REGCACHE_DESCRIPTOR_MAX_TEXT 134

typedef struct regcache_descriptor {
  uint64_t node_guid;   /* the key's NIC, as regcache_device_t */
  uint8_t gid[16];      /* its port's GID, network order */
  uint8_t port;         /* 1-based */
  uint8_t key_bounds;   /* REGCACHE_KEY_BOUNDS_* */
  uint8_t has_endpoint; /* 1: `endpoint` is the daemon's queue pair to connect to */
  uint8_t reserved;
  uint32_t rkey;
  uint64_t addr;   /* the first byte the peer may address */
  uint64_t length; /* bytes from addr */
  uint32_t access; /* REGCACHE_REMOTE_* only */
  uint32_t reserved2;
  regcache_qp_address_t endpoint;
} regcache_descriptor_t;

/* The descriptor of `key` (of `client`'s session), with `endpoint`'s address when it is not NULL
 * (the access is then what both the key and the endpoint accept). REGCACHE_INVALID_ARGUMENT for a
 * key with no remote right. */
REGCACHE_API regcache_code_t regcache_describe_key(const regcache_client_t* client,
                                                   const regcache_key_t* key,
                                                   const regcache_endpoint_t* endpoint,
                                                   regcache_descriptor_t* out);

/* Packs `descriptor` into buf[0, capacity); *written is its size (64 or 96 bytes).
 * REGCACHE_OUT_OF_RANGE when capacity is too small (nothing written); REGCACHE_INVALID_ARGUMENT
 * for a descriptor that regcache_descriptor_unpack would refuse. */
REGCACHE_API regcache_code_t regcache_descriptor_pack(const regcache_descriptor_t* descriptor,
                                                      void* buf, size_t capacity, size_t* written);

/* The descriptor in `length` bytes at `buf`. REGCACHE_INVALID_ARGUMENT for bytes that are not a
 * well-formed descriptor (the message names what is wrong); REGCACHE_FAILED_PRECONDITION for one
 * of a newer format version than this library reads. */
REGCACHE_API regcache_code_t regcache_descriptor_unpack(const void* buf, size_t length,
                                                        regcache_descriptor_t* out);

/* The text form ("rcd1:...", NUL-terminated) into buf[0, capacity) (REGCACHE_DESCRIPTOR_MAX_TEXT is
 * always enough; REGCACHE_OUT_OF_RANGE when it is smaller than needed), and back. */
REGCACHE_API regcache_code_t regcache_descriptor_to_text(const regcache_descriptor_t* descriptor,
                                                         char* buf, size_t capacity);
REGCACHE_API regcache_code_t regcache_descriptor_from_text(const char* text,
                                                           regcache_descriptor_t* out);

/* --- The simulated peer (regcache/sim_peer.h), on a daemon whose device simulates one
 * (--device=sim; REGCACHE_UNIMPLEMENTED elsewhere): what the remote node a descriptor was
 * handed to does with it, for tests, demos and docs/integrating.md. `client` stands in for that
 * node's NIC (any session on the same daemon and device); `self` is the queue pair the node
 * named to the key's owner (regcache_endpoint_create's peer), connected to the descriptor's
 * endpoint. A failed access returns the code the device's completion maps to (a revoked or
 * unknown rkey, a range or right outside the key: REGCACHE_PERMISSION_DENIED and friends, as
 * the message says); REGCACHE_INVALID_ARGUMENT for a descriptor without an endpoint;
 * REGCACHE_NOT_FOUND when no endpoint has that queue pair connected to `self`. */
REGCACHE_API regcache_code_t regcache_sim_peer_write(regcache_client_t* client,
                                                     const regcache_descriptor_t* descriptor,
                                                     const regcache_qp_address_t* self,
                                                     uint64_t addr, const void* data,
                                                     size_t length);
/* Reads `length` bytes (at most 1 MiB) at `addr` into `out` the same way. */
REGCACHE_API regcache_code_t regcache_sim_peer_read(regcache_client_t* client,
                                                    const regcache_descriptor_t* descriptor,
                                                    const regcache_qp_address_t* self,
                                                    uint64_t addr, void* out, size_t length);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* REGCACHE_REGCACHE_H_ */
