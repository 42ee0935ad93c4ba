/*
 * alloc.c — where all profiler memory comes from, and how much is in use.
 *
 * When jemalloc is already loaded in the process (LD_PRELOAD, or a Ruby built
 * with it), memory comes from a private jemalloc arena through mallocx/
 * sdallocx resolved with dlsym; otherwise from libc malloc. The extension is
 * never linked with -ljemalloc (see docs/architecture.md, "Memory"): jemalloc
 * cannot be dlopen'ed into a default process (static TLS), and pointers are
 * never freed across allocators.
 *
 * Context: any thread except signal handlers (both allocators take locks).
 */
#include "core_internal.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

typedef void *(*mallocx_fn)(size_t, int);
typedef void (*sdallocx_fn)(void *, size_t, int);
typedef int (*mallctl_fn)(const char *, void *, size_t *, void *, size_t);

static struct {
    mallocx_fn mallocx;
    sdallocx_fn sdallocx;
    int flags;                 /* MALLOCX_ARENA(idx) | MALLOCX_TCACHE_NONE */
    int use_jemalloc;
    _Atomic size_t bytes;
} A;

/* jemalloc's flag encodings (jemalloc/jemalloc.h, stable ABI) */
#define JE_MALLOCX_ARENA(a) ((int)(((unsigned)(a) + 1) << 20))
#define JE_MALLOCX_TCACHE_NONE (((int)(-1 + 2)) << 8) /* MALLOCX_TCACHE(-1) */
#define JE_MALLOCX_ZERO ((int)0x40)
#define JE_MALLOCX_LG_ALIGN(la) ((int)(la))
#define LINE 64
#define LG_LINE 6

int rperf__alloc_init(void)
{
    void *h = dlopen("libjemalloc.so.2", RTLD_NOLOAD | RTLD_LAZY);
    if (!h) return 0;
    /* dlsym returns void*; converting to a function pointer is what POSIX
     * requires dlsym users to do. */
    mallocx_fn mx;
    sdallocx_fn sdx;
    mallctl_fn ctl;
    *(void **)&mx = dlsym(h, "mallocx");
    *(void **)&sdx = dlsym(h, "sdallocx");
    *(void **)&ctl = dlsym(h, "mallctl");
    if (!mx || !sdx || !ctl) return 0;
    unsigned arena = 0;
    size_t sz = sizeof(arena);
    if (ctl("arenas.create", &arena, &sz, NULL, 0) != 0) return 0;
    A.mallocx = mx;
    A.sdallocx = sdx;
    A.flags = JE_MALLOCX_ARENA(arena) | JE_MALLOCX_TCACHE_NONE;
    A.use_jemalloc = 1;
    return 0;
}

const char *rperf_engine_allocator(void)
{
    return A.use_jemalloc ? "jemalloc" : "libc";
}

size_t rperf_engine_memory_bytes(void)
{
    return atomic_load_explicit(&A.bytes, memory_order_relaxed);
}

void *rperf__alloc(size_t size)
{
    if (size == 0) size = 1;
    void *p = A.use_jemalloc ? A.mallocx(size, A.flags) : malloc(size);
    if (p) atomic_fetch_add_explicit(&A.bytes, size, memory_order_relaxed);
    return p;
}

void *rperf__calloc(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size) return NULL;
    size_t total = n * size;
    if (total == 0) total = 1;
    void *p;
    if (A.use_jemalloc) {
        p = A.mallocx(total, A.flags | JE_MALLOCX_ZERO);
    } else {
        p = calloc(1, total);
    }
    if (p) atomic_fetch_add_explicit(&A.bytes, total, memory_order_relaxed);
    return p;
}

/* Zeroed, starting on a cache line, for the per-thread state whose fields
 * a GVL switch touches (kept in the first lines of the struct). Freed with
 * rperf__free_lines and the same size. */
void *rperf__calloc_lines(size_t size)
{
    size_t total = (size + LINE - 1) / LINE * LINE;
    if (total < size || total == 0) return NULL;
    void *p;
    if (A.use_jemalloc) {
        p = A.mallocx(total, A.flags | JE_MALLOCX_ZERO | JE_MALLOCX_LG_ALIGN(LG_LINE));
    } else {
        p = aligned_alloc(LINE, total);
        if (p) memset(p, 0, total);
    }
    if (p) atomic_fetch_add_explicit(&A.bytes, total, memory_order_relaxed);
    return p;
}

void rperf__free_lines(void *p, size_t size)
{
    if (!p) return;
    size_t total = (size + LINE - 1) / LINE * LINE;
    atomic_fetch_sub_explicit(&A.bytes, total, memory_order_relaxed);
    if (A.use_jemalloc) A.sdallocx(p, total, A.flags | JE_MALLOCX_LG_ALIGN(LG_LINE));
    else free(p);
}

void rperf__free(void *p, size_t size)
{
    if (!p) return;
    if (size == 0) size = 1;
    atomic_fetch_sub_explicit(&A.bytes, size, memory_order_relaxed);
    if (A.use_jemalloc) A.sdallocx(p, size, A.flags);
    else free(p);
}

/* Page-sized blocks (ring segments; contents undefined). With libc they are
 * mapped and unmapped directly: a server that starts a thread per connection
 * allocates a ring per thread on that thread's malloc arena and frees it
 * from the worker's, which left glibc's arenas fragmented and RSS creeping
 * up by megabytes per thousand threads; unmapped pages go back to the system
 * at once. jemalloc's private arena handles this itself.
 *
 * Thread churn (a thread per connection) would then cost an mmap, an munmap
 * and fresh page faults per thread: freed blocks of the most common size are
 * kept in a small cache (PAGE_CACHE_MAX blocks, counted in the profiler's
 * memory) and handed out again (blocks up to 64 KiB: the initial ring
 * size, not grown segments). The cache is guarded by a try-only lock: a
 * caller that finds it taken maps or unmaps directly, so nothing ever waits
 * on it, and a lock left taken by a thread that vanished in fork() only
 * disables the cache until the child resets it (rperf__pages_fork_child). */
#define PAGE_CACHE_MAX 64
#define PAGE_CACHE_BLOCK_MAX (64u << 10)   /* grown ring segments are not kept */

static struct {
    atomic_flag busy;
    size_t size;               /* size of every cached block */
    int n;
    void *blocks[PAGE_CACHE_MAX];
} PC = { .busy = ATOMIC_FLAG_INIT };

static void *cache_take(size_t size)
{
    if (atomic_flag_test_and_set_explicit(&PC.busy, memory_order_acquire)) return NULL;
    void *p = PC.n > 0 && PC.size == size ? PC.blocks[--PC.n] : NULL;
    atomic_flag_clear_explicit(&PC.busy, memory_order_release);
    return p;
}

static bool cache_put(void *p, size_t size)
{
    if (size > PAGE_CACHE_BLOCK_MAX) return false;
    if (atomic_flag_test_and_set_explicit(&PC.busy, memory_order_acquire)) return false;
    bool kept = false;
    if (PC.n == 0) PC.size = size;
    if (PC.size == size && PC.n < PAGE_CACHE_MAX) {
        PC.blocks[PC.n++] = p;
        kept = true;
    }
    atomic_flag_clear_explicit(&PC.busy, memory_order_release);
    return kept;
}

void *rperf__alloc_pages(size_t size)
{
    if (A.use_jemalloc) return rperf__calloc(1, size);
    void *p = cache_take(size);
    if (p) return p;
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    atomic_fetch_add_explicit(&A.bytes, size, memory_order_relaxed);
    return p;
}

void rperf__free_pages(void *p, size_t size)
{
    if (!p) return;
    if (A.use_jemalloc) {
        rperf__free(p, size);
        return;
    }
    if (cache_put(p, size)) return;
    atomic_fetch_sub_explicit(&A.bytes, size, memory_order_relaxed);
    munmap(p, size);
}

/* GVL held, no run (stop, fork reset): give the cached blocks back. */
void rperf__pages_release_cache(void)
{
    if (atomic_flag_test_and_set_explicit(&PC.busy, memory_order_acquire)) return;
    while (PC.n > 0) {
        atomic_fetch_sub_explicit(&A.bytes, PC.size, memory_order_relaxed);
        munmap(PC.blocks[--PC.n], PC.size);
    }
    atomic_flag_clear_explicit(&PC.busy, memory_order_release);
}

/* Inside fork() in the child (one thread): a lock held by a parent thread
 * that does not exist here is released; the blocks stay valid. */
void rperf__pages_fork_child(void) { atomic_flag_clear(&PC.busy); }

/* ---- ck_ht allocator: deferred frees go through the worker's epoch ------ */

typedef struct deferred_block {
    ck_epoch_entry_t entry;
    size_t size;                     /* of the whole block, header included */
} deferred_block_t;

/* ck_ht's memory is prefixed with a header so a deferred free can be
 * queued on the epoch without allocating. */
static void *ck_alloc_cb(size_t size)
{
    deferred_block_t *b = rperf__alloc(sizeof(*b) + size);
    if (!b) return NULL;
    b->size = sizeof(*b) + size;
    return b + 1;
}

static void deferred_free_cb(ck_epoch_entry_t *e)
{
    RPERF_EPOCH_RECLAIM();
    deferred_block_t *b = (deferred_block_t *)e;
    rperf__free(b, b->size);
}

static void ck_free_cb(void *p, size_t size, bool defer)
{
    (void)size;
    if (!p) return;
    deferred_block_t *b = (deferred_block_t *)p - 1;
    if (defer) {
        /* worker only: the record is owned by the (single) writer */
        ck_epoch_call(&rperf__epoch_worker, &b->entry, deferred_free_cb);
    } else {
        rperf__free(b, b->size);
    }
}

static void *ck_realloc_cb(void *p, size_t old, size_t size, bool defer)
{
    void *n = ck_alloc_cb(size);
    if (!n) return NULL;
    if (p) {
        memcpy(n, p, old < size ? old : size);
        ck_free_cb(p, old, defer);
    }
    return n;
}

struct ck_malloc rperf__ck_allocator = {
    .malloc = ck_alloc_cb,
    .realloc = ck_realloc_cb,
    .free = ck_free_cb,
};
