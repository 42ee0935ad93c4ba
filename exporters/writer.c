/* SPDX-License-Identifier: MIT */
/*
 * writer.c — byte sinks for exporters: growable memory buffer, atomic file
 * (temporary file + rename), and gzip (zlib deflate with a gzip header) over
 * another writer. Errors are sticky.
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
 * writes and EINTR. The temporary file lives beside the target so the
 * final rename(2) is atomic on POSIX file systems; it is unlinked by
 * rperf_writer_free() unless rperf_writer_finish() succeeded. No fsync: the
 * guarantee is "never a partial file after a failed export", not durability
 * across power loss.
 * See also rperf_exporter.h (contract), run.c (rperf_export_*).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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
    char *path, *tmp_path;
    /* gzip */
    rperf_writer_t *inner;
    z_stream zs;
    int zinit;
    unsigned char *zout;
};

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

/* ---- file -------------------------------------------------------------------- */

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
            return rperf_writer_fail(w, -e, "write %s: %s", w->tmp_path, strerror(e));
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
    rperf_writer_t *w = new_writer(W_FILE);
    if (!w)
        return -ENOMEM;
    size_t plen = strlen(path);
    w->path = malloc(plen + 1);
    w->tmp_path = malloc(plen + 32);
    w->data = malloc(FILE_BUF_SIZE);
    w->cap = FILE_BUF_SIZE;
    if (!w->path || !w->tmp_path || !w->data) {
        rperf_writer_free(w);
        return -ENOMEM;
    }
    memcpy(w->path, path, plen + 1);
    /* A random suffix with O_EXCL instead of mkstemp(): mkstemp creates the
     * file 0600, and restoring 0666 & ~umask would need the process-wide,
     * non-thread-safe umask(2). */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^
                    ((uint64_t)getpid() << 40) ^ (uint64_t)(uintptr_t)w;
    int e = 0;
    for (int attempt = 0; attempt < 64; attempt++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        snprintf(w->tmp_path, plen + 32, "%s.tmp.%06x", path, (unsigned)(seed >> 40) & 0xffffffu);
        w->fd = open(w->tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (w->fd >= 0)
            break;
        e = errno;
        if (e != EEXIST)
            break;
    }
    if (w->fd < 0) {
        free(w->tmp_path);
        w->tmp_path = NULL;
        rperf_writer_free(w);
        return -(e ? e : EEXIST);
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
    w->zout = malloc(GZ_OUT_SIZE);
    if (!w->zout) {
        rperf_writer_free(w);
        return -ENOMEM;
    }
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
        if (close(w->fd) != 0) {
            int e = errno;
            w->fd = -1;
            return rperf_writer_fail(w, -e, "close %s: %s", w->tmp_path, strerror(e));
        }
        w->fd = -1;
        if (rename(w->tmp_path, w->path) != 0) {
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
        if (w->fd >= 0)
            close(w->fd);
        if (!w->finished && w->tmp_path)
            unlink(w->tmp_path);
    }
    if (w->zinit)
        deflateEnd(&w->zs);
    free(w->zout);
    if (!w->grow)
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
