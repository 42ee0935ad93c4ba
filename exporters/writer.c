/* SPDX-License-Identifier: MIT */
/*
 * writer.c — byte sinks for exporters: growable memory buffer, file (what
 * is at the path decides how: atomic replace, written in place, or one of
 * the process's descriptors), and gzip (zlib deflate with a gzip header)
 * over another writer; the output path check done at start and the spare
 * descriptor kept for the file open at stop. Errors are sticky.
 *
 * Context: any non-signal thread; no Ruby API. A writer is used by one
 * thread at a time.
 *
 * DESIGN
 * One struct with a `kind` tag and a switch per operation (three kinds, no
 * need for a vtable). A memory writer's buffer comes from realloc(), or
 * from the host's grow function (the Ruby binding grows a String, so the
 * output needs no final copy); a size hint (reserve) allocates exactly and
 * prefaults. File writers buffer 64 KiB before write(2) and retry short
 * writes and EINTR.
 * A file writer's buffer, a gzip writer's output buffer and zlib's deflate
 * state (~400 KiB together, no block over 64 KiB) are mapped and unmapped
 * with the writer, never taken from malloc: a profiled server child writes
 * a window every 5 s (ruby/child_windows.c) from a thread of its own, to
 * which glibc gives one of the application's arenas (round-robin once its
 * arena limit is reached), and blocks of that size placed in an arena's
 * free space leave pages there that the allocator keeps resident after
 * they are freed: a little more RSS at every window (docs/performance.md,
 * "A server's workers"). Unmapped, they leave nothing behind.
 * A file writer never replaces what is at the path with something else:
 * the path's symlinks are followed to the final target; a regular file (or
 * nothing) is replaced atomically by a temporary file beside it, renamed
 * over it at finish after taking the old file's owner and mode (unlinked by
 * rperf_writer_free() unless finish succeeded); anything else — character
 * device, FIFO, socket, a regular file with other hard links or one whose
 * owner we cannot give back — is opened and written in place; /dev/stdout,
 * /dev/fd/N, /proc/self/fd/N are written to that descriptor, never closed.
 * No fsync: the guarantee is "never a partial regular file after a failed
 * export", not durability across power loss.
 * Descriptor exhaustion: a spare descriptor reserved at start (by the
 * binding, rperf_writer_spare_reserve) is closed and the open retried when
 * an open fails with EMFILE/ENFILE, so the profile is still written.
 * See also rperf_exporter.h (contract), run.c (rperf_export_*).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "exporter_internal.h"

enum { W_MEMORY, W_FILE, W_GZIP };

#define FILE_BUF_SIZE (64u * 1024u)
#define GZ_OUT_SIZE (64u * 1024u)

struct rperf_writer {
    int kind;
    int err;          /* 0 or sticky -errno */
    int finished;
    uint64_t bytes;
    char msg[256];
    /* memory + file buffer */
    unsigned char *data;
    size_t len, cap;
    rperf_writer_grow_fn grow;   /* memory: NULL = realloc() */
    void *grow_ctx;
    /* file */
    int fd;
    int borrowed_fd;  /* fd is the process's own (/dev/stdout…): never closed */
    char *path;       /* the final target (symlinks resolved) */
    char *tmp_path;   /* NULL when written in place */
    /* gzip */
    rperf_writer_t *inner;
    z_stream zs;
    int zinit;
    unsigned char *zout;
};

/* ---- mapped blocks ----------------------------------------------------------- */

/* A block of `n` bytes mapped for this writer alone (contents zero), or
 * NULL. The mapping's length is kept in a header one cache line long. */
#define BLOCK_HEAD 64u

static void *
block_alloc(size_t n)
{
    if (n > SIZE_MAX - BLOCK_HEAD)
        return NULL;
    size_t len = n + BLOCK_HEAD;
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    *(size_t *)m = len;
    return (char *)m + BLOCK_HEAD;
}

static void
block_free(void *p)
{
    if (!p)
        return;
    void *m = (char *)p - BLOCK_HEAD;
    munmap(m, *(size_t *)m);
}

/* zlib's allocator: its deflate state in mapped blocks too */
static voidpf
z_block_alloc(voidpf opaque, uInt items, uInt size)
{
    (void)opaque;
    if (size && items > SIZE_MAX / size)
        return Z_NULL;
    return block_alloc((size_t)items * size);
}

static void
z_block_free(voidpf opaque, voidpf p)
{
    (void)opaque;
    block_free(p);
}

/* Also the writer's own way to fail: the first error sticks. */
int
rperf_writer_fail(rperf_writer_t *w, int err, const char *fmt, ...)
{
    if (w->err)
        return w->err;
    w->err = err ? err : -EIO;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->msg, sizeof w->msg, fmt, ap);
    va_end(ap);
    return w->err;
}

int
rperf_writer_status(const rperf_writer_t *w)
{
    return w->err;
}

const char *
rperf_writer_error(const rperf_writer_t *w)
{
    return w->err ? w->msg : "";
}

uint64_t
rperf_writer_bytes(const rperf_writer_t *w)
{
    return w->bytes;
}

/* ---- memory ------------------------------------------------------------------ */

/* Fault in [p, p + n) in one call (Linux >= 5.14) instead of one page
 * fault per page as the bytes arrive: a size hint says they all will.
 * Saves about a quarter of the time to fill 100 MB of fresh memory. Only a
 * hint: failures are ignored. */
static void
prefault(unsigned char *p, size_t n)
{
#ifdef MADV_POPULATE_WRITE
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0 || n < ((size_t)1 << 20))
        return;
    uintptr_t a = ((uintptr_t)p + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);
    uintptr_t e = ((uintptr_t)p + n) & ~((uintptr_t)pg - 1);
    if (e > a)
        (void)madvise((void *)a, e - a, MADV_POPULATE_WRITE);
#else
    (void)p;
    (void)n;
#endif
}

/* Make room for `extra` more bytes: exactly that many when `exact` (a size
 * hint, prefaulted), else by doubling. */
static int
mem_reserve(rperf_writer_t *w, size_t extra, int exact)
{
    if (w->cap - w->len >= extra)
        return 0;
    size_t need = w->len + extra;
    if (need < w->len)
        return rperf_writer_fail(w, -ENOMEM, "out of memory");
    size_t cap = exact ? need : (w->cap ? w->cap : 4096);
    while (cap < need) {
        if (cap > SIZE_MAX / 2)
            return rperf_writer_fail(w, -ENOMEM, "out of memory");
        cap *= 2;
    }
    unsigned char *p = w->grow ? w->grow(w->grow_ctx, w->data, w->len, cap) : realloc(w->data, cap);
    if (!p)
        return rperf_writer_fail(w, -ENOMEM, "out of memory (%zu bytes)", cap);
    w->data = p;
    w->cap = cap;
    if (exact)
        prefault(p + w->len, cap - w->len);
    return 0;
}

/* ---- file: where the bytes go ---------------------------------------------------- */

/* The descriptor kept in reserve by rperf_writer_spare_reserve(), or -1. */
static _Atomic int spare_fd = -1;

int
rperf_writer_spare_reserve(void)
{
    if (atomic_load(&spare_fd) >= 0)
        return 0;
    int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int none = -1;
    if (!atomic_compare_exchange_strong(&spare_fd, &none, fd))
        close(fd); /* another thread reserved one meanwhile */
    return 0;
}

void
rperf_writer_spare_release(void)
{
    int fd = atomic_exchange(&spare_fd, -1);
    if (fd >= 0)
        close(fd);
}

/* After a call that failed with errno EMFILE/ENFILE: give the spare
 * descriptor back to the system so that the retry can succeed. 1 if there
 * was one. */
static int
use_spare(void)
{
    if (errno != EMFILE && errno != ENFILE)
        return 0;
    int fd = atomic_exchange(&spare_fd, -1);
    if (fd < 0)
        return 0;
    close(fd);
    return 1;
}

static int
open_fd(const char *path, int flags, mode_t mode)
{
    int fd = open(path, flags | O_CLOEXEC, mode);
    if (fd < 0 && use_spare())
        fd = open(path, flags | O_CLOEXEC, mode);
    return fd;
}

/* A Unix-domain stream socket at `path`, connected. */
static int
connect_unix(const char *path)
{
    struct sockaddr_un sa;
    if (strlen(path) >= sizeof sa.sun_path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 && use_spare())
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* N when `p` names one of this process's descriptors (/dev/fd/N,
 * /proc/self/fd/N, /proc/thread-self/fd/N, /proc/<our pid>/fd/N), else -1. */
static int
fd_path(const char *p)
{
    const char *rest = NULL;
    char pid[48];
    snprintf(pid, sizeof pid, "/proc/%ld/fd/", (long)getpid());
    static const char *const prefixes[] = {"/dev/fd/", "/proc/self/fd/", "/proc/thread-self/fd/"};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0] && !rest; i++)
        if (strncmp(p, prefixes[i], strlen(prefixes[i])) == 0)
            rest = p + strlen(prefixes[i]);
    if (!rest && strncmp(p, pid, strlen(pid)) == 0)
        rest = p + strlen(pid);
    if (!rest || *rest < '0' || *rest > '9')
        return -1;
    char *end;
    long n = strtol(rest, &end, 10);
    return *end || n > 1 << 30 ? -1 : (int)n;
}

/* What writing `path` means, decided when the writer opens (and by
 * rperf_writer_check_path() at start). */
typedef struct {
    int how;          /* T_* */
    int fd;           /* T_FD: the process's own descriptor */
    char *path;       /* the final target, symlinks resolved (malloc'd) */
    int exists;
    struct stat st;   /* of the final target when it exists */
} target_t;

enum {
    T_ATOMIC,  /* regular file or nothing: temporary file + rename */
    T_INPLACE, /* device, FIFO, socket, or a regular file we must not replace */
    T_FD,      /* one of our descriptors (/dev/stdout…): written, never closed */
};

/* Follow `path` through symlinks (chains too) to the final target. The
 * kernel resolves every directory on the way; only the last component is
 * followed here, so that a missing final target (dangling link) is known
 * by its own name and a descriptor link (/dev/stdout -> /proc/self/fd/1)
 * is recognised before its magic target ("pipe:[…]") is read. */
static int
resolve_chain(const char *path, target_t *t, char *msg, size_t msglen)
{
    t->fd = -1;
    char *cur = strdup(path);
    if (!cur)
        return -ENOMEM;
    for (int hops = 0;; hops++) {
        int n = fd_path(cur);
        if (n >= 0) {
            t->how = T_FD;
            t->fd = n;
            t->path = cur;
            int fl = fcntl(n, F_GETFL);
            if (fl < 0 || (fl & O_ACCMODE) == O_RDONLY) {
                snprintf(msg, msglen, "%s: descriptor %d is %s", path, n,
                         fl < 0 ? "not open" : "not open for writing");
                return fl < 0 ? -EBADF : -EACCES;
            }
            return 0;
        }
        if (lstat(cur, &t->st) != 0) {
            int e = errno;
            t->path = cur;
            if (e == ENOENT)
                return 0; /* a new file (its directory is checked by the caller) */
            snprintf(msg, msglen, "%s: %s", cur, strerror(e));
            return -e;
        }
        if (!S_ISLNK(t->st.st_mode)) {
            t->exists = 1;
            t->path = cur;
            break;
        }
        if (hops >= 40) {
            free(cur);
            snprintf(msg, msglen, "%s: too many levels of symbolic links", path);
            return -ELOOP;
        }
        char link[PATH_MAX];
        ssize_t len = readlink(cur, link, sizeof link - 1);
        if (len < 0) {
            int e = errno;
            snprintf(msg, msglen, "%s: %s", cur, strerror(e));
            free(cur);
            return -e;
        }
        link[len] = '\0';
        /* A relative link is relative to the directory holding it. */
        const char *slash = strrchr(cur, '/');
        size_t dlen = link[0] == '/' || !slash ? 0 : (size_t)(slash - cur) + 1;
        char *next = malloc(dlen + (size_t)len + 1);
        if (!next) {
            free(cur);
            return -ENOMEM;
        }
        memcpy(next, cur, dlen);
        memcpy(next + dlen, link, (size_t)len + 1);
        free(cur);
        cur = next;
    }
    mode_t m = t->st.st_mode;
    if (S_ISDIR(m)) {
        snprintf(msg, msglen, "%s is a directory", t->path);
        return -EISDIR;
    }
    /* A regular file with other hard links is written in place: a rename
     * would leave the other names on the old contents. */
    t->how = S_ISREG(m) && t->st.st_nlink <= 1 ? T_ATOMIC : T_INPLACE;
    return 0;
}

static void
target_free(target_t *t)
{
    free(t->path);
    t->path = NULL;
}

/* resolve_chain(), owning nothing on failure (a message in msg). */
static int
resolve_target(const char *path, target_t *t, char *msg, size_t msglen)
{
    memset(t, 0, sizeof *t);
    t->fd = -1;
    int rc = resolve_chain(path, t, msg, msglen);
    if (rc)
        target_free(t);
    return rc;
}

/* "<dir of target>" into buf (for messages and the check). */
static void
dir_of(const char *p, char *buf, size_t len)
{
    const char *slash = strrchr(p, '/');
    if (!slash)
        snprintf(buf, len, ".");
    else if (slash == p)
        snprintf(buf, len, "/");
    else
        snprintf(buf, len, "%.*s", (int)(slash - p), p);
}

/* Create "<target>.tmp.<random>" with O_EXCL; its name goes to tmp (cap
 * bytes). A random suffix with O_EXCL instead of mkstemp(): mkstemp creates
 * the file 0600, and restoring 0666 & ~umask would need the process-wide,
 * non-thread-safe umask(2). Returns the descriptor or -errno. */
static int
create_temp(const char *target, char *tmp, size_t cap, const void *salt)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^
                    ((uint64_t)getpid() << 40) ^ (uint64_t)(uintptr_t)salt;
    int e = EEXIST;
    for (int attempt = 0; attempt < 64; attempt++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        snprintf(tmp, cap, "%s.tmp.%06x", target, (unsigned)(seed >> 40) & 0xffffffu);
        int fd = open_fd(tmp, O_WRONLY | O_CREAT | O_EXCL, 0666);
        if (fd >= 0)
            return fd;
        e = errno;
        if (e != EEXIST)
            break;
    }
    return -e;
}

/* An existing regular target keeps its owner and mode: the temporary file
 * takes them before the rename. -EPERM when the owner cannot be given
 * (not root, someone else's file): the caller then writes in place. */
static int
copy_owner_mode(int fd, const struct stat *st)
{
    struct stat mine;
    if (fstat(fd, &mine) != 0)
        return -errno;
    if ((mine.st_uid != st->st_uid || mine.st_gid != st->st_gid) &&
        fchown(fd, st->st_uid, st->st_gid) != 0)
        return -errno;
    if (fchmod(fd, st->st_mode & 07777) != 0)
        return -errno;
    return 0;
}

/* Open the non-atomic targets: descriptors, devices, FIFOs (blocks until a
 * reader opens the other end), sockets, shared regular files. */
static int
open_in_place(const target_t *t)
{
    if (t->how == T_FD)
        return t->fd;
    if (t->exists && S_ISSOCK(t->st.st_mode))
        return connect_unix(t->path);
    int flags = O_WRONLY | O_NOCTTY | (t->exists && S_ISREG(t->st.st_mode) ? O_TRUNC : 0);
    return open_fd(t->path, flags, 0);
}

int
rperf_writer_check_path(const char *path, char *msg, size_t msglen)
{
    char scratch[8];
    if (!msg || !msglen) {
        msg = scratch;
        msglen = sizeof scratch;
    }
    msg[0] = '\0';
    if (!path || !*path) {
        snprintf(msg, msglen, "empty path");
        return -EINVAL;
    }
    target_t t;
    int rc = resolve_target(path, &t, msg, msglen);
    if (rc)
        return rc;
    if (t.how == T_FD) {
        target_free(&t);
        return 0;
    }
    if (t.how == T_INPLACE) {
        /* Not opened now: a FIFO would block until its reader comes. */
        if (access(t.path, W_OK) != 0) {
            rc = -errno;
            snprintf(msg, msglen, "%s is not writable: %s", t.path, strerror(-rc));
        }
        target_free(&t);
        return rc;
    }
    /* Atomic: the directory must exist and take a new file — tried for
     * real (a probe file, removed at once), which also catches read-only
     * mounts and immutable directories where access(2) says yes to root. */
    char dir[PATH_MAX];
    dir_of(t.path, dir, sizeof dir);
    struct stat ds;
    if (stat(dir, &ds) != 0)
        rc = -errno;
    else if (!S_ISDIR(ds.st_mode))
        rc = -ENOTDIR;
    if (rc) {
        if (rc == -ENOENT)
            snprintf(msg, msglen, "directory %s does not exist", dir);
        else
            snprintf(msg, msglen, "directory %s: %s", dir, strerror(-rc));
        target_free(&t);
        return rc;
    }
    if (t.exists && access(t.path, W_OK) != 0) {
        rc = -errno;
        snprintf(msg, msglen, "%s is not writable: %s", t.path, strerror(-rc));
        target_free(&t);
        return rc;
    }
    size_t cap = strlen(t.path) + 32;
    char *tmp = malloc(cap);
    if (!tmp) {
        target_free(&t);
        return -ENOMEM;
    }
    int fd = create_temp(t.path, tmp, cap, &t);
    if (fd < 0) {
        rc = fd;
        snprintf(msg, msglen, "cannot create files in %s: %s", dir, strerror(-rc));
    } else {
        close(fd);
        unlink(tmp);
    }
    free(tmp);
    target_free(&t);
    return rc;
}

/* write(2) all of p[0..len), retrying short writes and EINTR. */
static int
file_write_all(rperf_writer_t *w, const unsigned char *p, size_t len)
{
    size_t off = 0;
    while (off < len) {
        ssize_t n = write(w->fd, p + off, len - off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            return rperf_writer_fail(w, -e, "write %s: %s", w->tmp_path ? w->tmp_path : w->path,
                                     strerror(e));
        }
        off += (size_t)n;
    }
    return 0;
}

static int
file_flush(rperf_writer_t *w)
{
    if (file_write_all(w, w->data, w->len))
        return w->err;
    w->len = 0;
    return 0;
}

/* ---- gzip -------------------------------------------------------------------- */

static int
gz_pump(rperf_writer_t *w, int flush)
{
    for (;;) {
        w->zs.next_out = w->zout;
        w->zs.avail_out = GZ_OUT_SIZE;
        int zr = deflate(&w->zs, flush);
        if (zr == Z_STREAM_ERROR)
            return rperf_writer_fail(w, -EIO, "zlib deflate: stream error");
        size_t produced = GZ_OUT_SIZE - w->zs.avail_out;
        if (produced) {
            int rc = rperf_writer_write(w->inner, w->zout, produced);
            if (rc)
                return rperf_writer_fail(w, rc, "%s", rperf_writer_error(w->inner));
        }
        if (flush == Z_FINISH) {
            if (zr == Z_STREAM_END)
                return 0;
        } else if (w->zs.avail_in == 0 && w->zs.avail_out != 0) {
            return 0;
        }
    }
}

/* ---- generic ----------------------------------------------------------------- */

int
rperf_writer_write(rperf_writer_t *w, const void *buf, size_t len)
{
    if (w->err)
        return w->err;
    if (w->finished)
        return rperf_writer_fail(w, -EINVAL, "write after finish");
    if (len == 0)
        return 0;
    switch (w->kind) {
    case W_MEMORY:
        if (mem_reserve(w, len, 0))
            return w->err;
        memcpy(w->data + w->len, buf, len);
        w->len += len;
        break;
    case W_FILE:
        if (len >= FILE_BUF_SIZE) {
            if (file_flush(w) || file_write_all(w, buf, len))
                return w->err;
        } else {
            if (w->cap - w->len < len && file_flush(w))
                return w->err;
            memcpy(w->data + w->len, buf, len);
            w->len += len;
        }
        break;
    case W_GZIP: {
        const unsigned char *p = buf;
        size_t left = len;
        while (left) {
            /* avail_in is a uInt; feed at most 1 GiB at a time. */
            uInt chunk = left > (1u << 30) ? (1u << 30) : (uInt)left;
            w->zs.next_in = (Bytef *)(uintptr_t)p; /* zlib's API is not const-correct */
            w->zs.avail_in = chunk;
            if (gz_pump(w, Z_NO_FLUSH))
                return w->err;
            p += chunk;
            left -= chunk;
        }
        break;
    }
    }
    w->bytes += len;
    return 0;
}

int
rperf_writer_reserve(rperf_writer_t *w, size_t n)
{
    if (w->err)
        return w->err;
    return w->kind == W_MEMORY ? mem_reserve(w, n, 1) : 0;
}

int
rperf_writer_write_utf8(rperf_writer_t *w, const char *p, size_t len)
{
    if (rperf__utf8_valid(p, len))
        return rperf_writer_write(w, p, len);
    rperf__buf_t tmp = {0};
    size_t n;
    const char *s = rperf__utf8_sanitize(p, len, &tmp, &n);
    int rc = s ? rperf_writer_write(w, s, n) : rperf_writer_fail(w, -ENOMEM, "out of memory");
    rperf__buf_free(&tmp);
    return rc;
}

int
rperf_writer_puts(rperf_writer_t *w, const char *s)
{
    return rperf_writer_write(w, s, strlen(s));
}

int
rperf_writer_printf(rperf_writer_t *w, const char *fmt, ...)
{
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return rperf_writer_fail(w, -EINVAL, "printf: bad format");
    if ((size_t)n < sizeof small)
        return rperf_writer_write(w, small, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big)
        return rperf_writer_fail(w, -ENOMEM, "out of memory");
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    int rc = rperf_writer_write(w, big, (size_t)n);
    free(big);
    return rc;
}

static rperf_writer_t *
new_writer(int kind)
{
    rperf_writer_t *w = calloc(1, sizeof *w);
    if (w) {
        w->kind = kind;
        w->fd = -1;
    }
    return w;
}

int
rperf_writer_memory_open(rperf_writer_t **out)
{
    return rperf_writer_buffer_open(out, NULL, NULL);
}

int
rperf_writer_buffer_open(rperf_writer_t **out, rperf_writer_grow_fn grow, void *ctx)
{
    rperf_writer_t *w = new_writer(W_MEMORY);
    if (!w)
        return -ENOMEM;
    w->grow = grow;
    w->grow_ctx = ctx;
    *out = w;
    return 0;
}

int
rperf_writer_file_open(rperf_writer_t **out, const char *path)
{
    if (!path || !*path)
        return -EINVAL;
    char msg[8];
    target_t t;
    int rc = resolve_target(path, &t, msg, sizeof msg);
    if (rc)
        return rc;
    rperf_writer_t *w = new_writer(W_FILE);
    if (!w) {
        target_free(&t);
        return -ENOMEM;
    }
    w->path = t.path; /* the final target: symlinks are written through */
    w->data = block_alloc(FILE_BUF_SIZE);
    w->cap = FILE_BUF_SIZE;
    if (!w->data) {
        rperf_writer_free(w);
        return -ENOMEM;
    }
    if (t.how == T_ATOMIC) {
        size_t cap = strlen(t.path) + 32;
        if (!(w->tmp_path = malloc(cap))) {
            rperf_writer_free(w);
            return -ENOMEM;
        }
        w->fd = create_temp(t.path, w->tmp_path, cap, w);
        if (w->fd < 0) {
            rc = w->fd;
            free(w->tmp_path);
            w->tmp_path = NULL;
            rperf_writer_free(w);
            return rc;
        }
        if (t.exists && (rc = copy_owner_mode(w->fd, &t.st)) != 0) {
            /* Someone else's file we may write but not re-create as
             * theirs: write it in place (not atomic) rather than replace it. */
            close(w->fd);
            w->fd = -1;
            unlink(w->tmp_path);
            free(w->tmp_path);
            w->tmp_path = NULL;
            t.how = T_INPLACE;
        }
    }
    if (t.how != T_ATOMIC) {
        w->fd = open_in_place(&t);
        if (w->fd < 0) {
            rc = -errno;
            rperf_writer_free(w);
            return rc;
        }
        w->borrowed_fd = t.how == T_FD;
    }
    *out = w;
    return 0;
}

int
rperf_writer_gzip_open(rperf_writer_t **out, rperf_writer_t *inner, int level)
{
    if (!inner || level < -1 || level > 9)
        return -EINVAL;
    rperf_writer_t *w = new_writer(W_GZIP);
    if (!w)
        return -ENOMEM;
    w->inner = inner;
    w->zout = block_alloc(GZ_OUT_SIZE);
    if (!w->zout) {
        rperf_writer_free(w);
        return -ENOMEM;
    }
    w->zs.zalloc = z_block_alloc;
    w->zs.zfree = z_block_free;
    w->zs.opaque = Z_NULL;
    /* windowBits 15 + 16: zlib writes a gzip header and trailer. */
    if (deflateInit2(&w->zs, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
        rperf_writer_free(w);
        return -ENOMEM;
    }
    w->zinit = 1;
    *out = w;
    return 0;
}

int
rperf_writer_finish(rperf_writer_t *w)
{
    if (w->err || w->finished)
        return w->err;
    switch (w->kind) {
    case W_MEMORY:
        break;
    case W_GZIP:
        w->zs.next_in = NULL;
        w->zs.avail_in = 0;
        if (gz_pump(w, Z_FINISH))
            return w->err;
        break;
    case W_FILE:
        if (file_flush(w))
            return w->err;
        if (w->borrowed_fd) {
            w->fd = -1; /* the process's own descriptor stays open */
            break;
        }
        if (close(w->fd) != 0) {
            int e = errno;
            w->fd = -1;
            return rperf_writer_fail(w, -e, "close %s: %s", w->tmp_path ? w->tmp_path : w->path,
                                     strerror(e));
        }
        w->fd = -1;
        if (w->tmp_path && rename(w->tmp_path, w->path) != 0) {
            int e = errno;
            return rperf_writer_fail(w, -e, "rename %s -> %s: %s", w->tmp_path, w->path,
                                     strerror(e));
        }
        break;
    }
    w->finished = 1;
    return 0;
}

void
rperf_writer_free(rperf_writer_t *w)
{
    if (!w)
        return;
    if (w->kind == W_FILE) {
        if (w->fd >= 0 && !w->borrowed_fd)
            close(w->fd);
        if (!w->finished && w->tmp_path)
            unlink(w->tmp_path);
    }
    if (w->zinit)
        deflateEnd(&w->zs);
    block_free(w->zout);
    if (w->kind == W_FILE)
        block_free(w->data);
    else if (!w->grow)
        free(w->data);
    free(w->path);
    free(w->tmp_path);
    free(w);
}

const unsigned char *
rperf_writer_memory_data(const rperf_writer_t *w, size_t *len)
{
    if (w->kind != W_MEMORY) {
        *len = 0;
        return NULL;
    }
    *len = w->len;
    return w->data;
}

unsigned char *
rperf_writer_memory_take(rperf_writer_t *w, size_t *len)
{
    if (w->kind != W_MEMORY || w->grow) {
        *len = 0;
        return NULL;
    }
    unsigned char *p = w->data;
    *len = w->len;
    if (!p) /* nothing written: hand out a real (empty) allocation */
        p = malloc(1);
    w->data = NULL;
    w->len = w->cap = 0;
    return p;
}
