/*
 * test_exporter_writer.c — writers (memory, caller-grown buffer, atomic
 * file, file targets that are not replaced — symlinks, FIFO, descriptor,
 * device, hard link, kept owner and mode —, the output path check, the
 * spare descriptor under EMFILE, gzip, a gzip file writer's buffers kept
 * out of malloc, sticky errors), the registry (built-ins, runtime registration, validation) and
 * the export drivers' failure paths (no partial or temporary file left).
 * Context: plain C test program, no Ruby. Uses a private directory under
 * $TMPDIR (or /tmp), removed at the end.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "rperf_test.h"
#include "test_exporter_fixture.h"

static char dir[256];

static int
exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* Number of directory entries other than . and .. */
static int
dir_entries(void)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    if (!d)
        return -1;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

static char *
slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = '\0';
    fclose(f);
    *len = got;
    return s;
}

RPERF_TEST(memory_writer)
{
    rperf_writer_t *w;
    RPERF_CHECK_EQ(rperf_writer_memory_open(&w), 0);
    RPERF_CHECK_EQ(rperf_writer_puts(w, "abc"), 0);
    RPERF_CHECK_EQ(rperf_writer_printf(w, "-%d-", 42), 0);
    char big[2000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    RPERF_CHECK_EQ(rperf_writer_printf(w, "%s", big), 0); /* > printf's stack buffer */
    size_t len;
    const unsigned char *d = rperf_writer_memory_data(w, &len);
    RPERF_CHECK_EQ(len, 7 + 1999);
    RPERF_CHECK(memcmp(d, "abc-42-x", 8) == 0);
    RPERF_CHECK_EQ(rperf_writer_bytes(w), 7 + 1999);
    RPERF_CHECK_EQ(rperf_writer_finish(w), 0);
    RPERF_CHECK_STR(rperf_writer_error(w), "");
    unsigned char *taken = rperf_writer_memory_take(w, &len);
    RPERF_CHECK(taken != NULL && len == 2006);
    free(taken);
    rperf_writer_free(w);
    rperf_writer_free(NULL);
}

/* The grow function of a buffer writer: a realloc'd block that counts its
 * calls and can be told to fail; the test owns (frees) the buffer. */
typedef struct {
    int calls, fail_at;
    size_t last_len, last_cap;
} grow_log_t;

static void *
test_grow(void *ctx, void *buf, size_t len, size_t cap)
{
    grow_log_t *g = ctx;
    g->calls++;
    g->last_len = len;
    g->last_cap = cap;
    if (g->calls == g->fail_at)
        return NULL;
    return realloc(buf, cap);
}

RPERF_TEST(buffer_writer_grow_fn)
{
    grow_log_t g = {0, 0, 0, 0};
    rperf_writer_t *w;
    RPERF_CHECK_EQ(rperf_writer_buffer_open(&w, test_grow, &g), 0);
    RPERF_CHECK_EQ(rperf_writer_reserve(w, 10), 0); /* a hint: exactly 10 */
    RPERF_CHECK(g.calls == 1 && g.last_len == 0 && g.last_cap == 10);
    RPERF_CHECK_EQ(rperf_writer_puts(w, "0123456789"), 0);
    RPERF_CHECK_EQ(g.calls, 1);
    RPERF_CHECK_EQ(rperf_writer_puts(w, "abc"), 0); /* grows, keeping 10 bytes */
    RPERF_CHECK(g.calls == 2 && g.last_len == 10 && g.last_cap >= 13);
    size_t len;
    const unsigned char *d = rperf_writer_memory_data(w, &len);
    RPERF_CHECK(len == 13 && memcmp(d, "0123456789abc", 13) == 0);
    RPERF_CHECK(rperf_writer_memory_take(w, &len) == NULL && len == 0); /* not ours to hand out */
    RPERF_CHECK_EQ(rperf_writer_finish(w), 0);
    void *buf = (void *)rperf_writer_memory_data(w, &len);
    rperf_writer_free(w); /* does not free the buffer */
    free(buf);

    /* A failing grow function fails the writer, stickily. */
    grow_log_t bad = {0, 1, 0, 0};
    RPERF_CHECK_EQ(rperf_writer_buffer_open(&w, test_grow, &bad), 0);
    RPERF_CHECK_EQ(rperf_writer_puts(w, "x"), -ENOMEM);
    RPERF_CHECK_EQ(rperf_writer_puts(w, "y"), -ENOMEM);
    RPERF_CHECK(strstr(rperf_writer_error(w), "out of memory") != NULL);
    rperf_writer_free(w);

    /* rperf_export_to_writer() into it: same bytes as rperf_export_to_memory(). */
    rperf_profile_view_t v = fx_view();
    char err[256];
    grow_log_t g2 = {0, 0, 0, 0};
    RPERF_CHECK_EQ(rperf_writer_buffer_open(&w, test_grow, &g2), 0);
    RPERF_CHECK_EQ(rperf_export_to_writer(&rperf_exporter_collapsed, &v, NULL, -1, w, err,
                                          sizeof err), 0);
    size_t mlen;
    char *mem = fx_export("collapsed", &v, NULL, &mlen);
    d = rperf_writer_memory_data(w, &len);
    RPERF_CHECK(mem && len == mlen && memcmp(d, mem, len) == 0);
    RPERF_CHECK_EQ(g2.calls, 1); /* the collapsed exporter reserves its exact size */
    free(mem);
    free((void *)d);
    rperf_writer_free(w);
}

RPERF_TEST(sticky_error)
{
    rperf_writer_t *w;
    RPERF_CHECK_EQ(rperf_writer_memory_open(&w), 0);
    RPERF_CHECK_EQ(rperf_writer_fail(w, -EIO, "boom %d", 1), -EIO);
    RPERF_CHECK_EQ(rperf_writer_fail(w, -ENOMEM, "second"), -EIO); /* first error wins */
    RPERF_CHECK_EQ(rperf_writer_puts(w, "x"), -EIO);
    RPERF_CHECK_EQ(rperf_writer_status(w), -EIO);
    RPERF_CHECK_STR(rperf_writer_error(w), "boom 1");
    RPERF_CHECK_EQ(rperf_writer_finish(w), -EIO);
    rperf_writer_free(w);
}

RPERF_TEST(file_writer_atomic)
{
    char path[320];
    snprintf(path, sizeof path, "%s/out.txt", dir);
    rperf_writer_t *w;
    RPERF_CHECK_EQ(rperf_writer_file_open(&w, path), 0);
    for (int i = 0; i < 10000; i++) /* > the 64 KiB buffer */
        rperf_writer_printf(w, "line %d\n", i);
    char huge[100000];
    memset(huge, 'z', sizeof huge); /* one write larger than the buffer */
    RPERF_CHECK_EQ(rperf_writer_write(w, huge, sizeof huge), 0);
    RPERF_CHECK(!exists(path));   /* nothing at the target before finish */
    RPERF_CHECK_EQ(dir_entries(), 1); /* the temporary file */
    RPERF_CHECK_EQ(rperf_writer_finish(w), 0);
    RPERF_CHECK(exists(path));
    RPERF_CHECK_EQ(dir_entries(), 1); /* renamed, no temp left */
    rperf_writer_free(w);
    RPERF_CHECK(exists(path));
    size_t len;
    char *s = slurp(path, &len);
    RPERF_CHECK(s && strncmp(s, "line 0\nline 1\n", 14) == 0);
    RPERF_CHECK(s && len == 98890 + sizeof huge);
    free(s);
    unlink(path);
    /* Unfinished: freeing removes the temporary file, target untouched. */
    RPERF_CHECK_EQ(rperf_writer_file_open(&w, path), 0);
    rperf_writer_puts(w, "partial");
    rperf_writer_free(w);
    RPERF_CHECK(!exists(path));
    RPERF_CHECK_EQ(dir_entries(), 0);
}

RPERF_TEST(file_writer_unwritable)
{
    char path[320];
    snprintf(path, sizeof path, "%s/missing-dir/out.txt", dir);
    rperf_writer_t *w = NULL;
    RPERF_CHECK_EQ(rperf_writer_file_open(&w, path), -ENOENT);
    RPERF_CHECK(w == NULL);
    RPERF_CHECK_EQ(rperf_writer_file_open(&w, ""), -EINVAL);
    rperf_profile_view_t v = fx_view();
    char err[256] = "";
    RPERF_CHECK_EQ(rperf_export_to_file(&rperf_exporter_text, &v, NULL, -1, path, err, sizeof err),
                   -ENOENT);
    RPERF_CHECK(strstr(err, "missing-dir") != NULL);
    RPERF_CHECK_EQ(dir_entries(), 0);
}


/* Write `text` to `path` through a file writer. */
static int
write_text(const char *path, const char *text)
{
    rperf_writer_t *w;
    int rc = rperf_writer_file_open(&w, path);
    if (rc)
        return rc;
    rperf_writer_puts(w, text);
    rc = rperf_writer_finish(w);
    rperf_writer_free(w);
    return rc;
}

/* 1 if the file at `path` holds exactly `want`. */
static int
file_is(const char *path, const char *want)
{
    size_t len;
    char *s = slurp(path, &len);
    int ok = s && len == strlen(want) && memcmp(s, want, len) == 0;
    free(s);
    return ok;
}

static char *
in_dir(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
    return buf;
}

RPERF_TEST(file_writer_follows_symlinks)
{
    char real[320], l1[320], l2[320], dangling[320], made[320];
    in_dir(real, sizeof real, "real.txt");
    in_dir(l1, sizeof l1, "link1");
    in_dir(l2, sizeof l2, "link2");
    in_dir(dangling, sizeof dangling, "dangling");
    in_dir(made, sizeof made, "made.txt");
    RPERF_CHECK_EQ(write_text(real, "old"), 0);
    RPERF_CHECK_EQ(chmod(real, 0640), 0);
    RPERF_CHECK_EQ(symlink("real.txt", l1), 0);   /* relative */
    RPERF_CHECK_EQ(symlink(l1, l2), 0);           /* absolute, to a link */
    RPERF_CHECK_EQ(symlink("made.txt", dangling), 0);
    RPERF_CHECK_EQ(write_text(l2, "through two links"), 0);
    struct stat st;
    RPERF_CHECK(lstat(l1, &st) == 0 && S_ISLNK(st.st_mode));
    RPERF_CHECK(lstat(l2, &st) == 0 && S_ISLNK(st.st_mode));
    RPERF_CHECK(lstat(real, &st) == 0 && S_ISREG(st.st_mode));
    RPERF_CHECK_EQ(st.st_mode & 07777, 0640); /* the target's mode is kept */
    RPERF_CHECK(file_is(real, "through two links"));
    /* A dangling link: its target is created, the link stays. */
    RPERF_CHECK_EQ(write_text(dangling, "new"), 0);
    RPERF_CHECK(lstat(dangling, &st) == 0 && S_ISLNK(st.st_mode));
    RPERF_CHECK(file_is(made, "new"));
    /* A loop is an error, not a hang. */
    char loop[320];
    in_dir(loop, sizeof loop, "loop");
    RPERF_CHECK_EQ(symlink("loop", loop), 0);
    rperf_writer_t *w = NULL;
    RPERF_CHECK_EQ(rperf_writer_file_open(&w, loop), -ELOOP);
    RPERF_CHECK(w == NULL);
    unlink(loop);
    unlink(l2);
    unlink(l1);
    unlink(dangling);
    unlink(made);
    unlink(real);
    RPERF_CHECK_EQ(dir_entries(), 0);
}

RPERF_TEST(file_writer_keeps_owner_and_mode)
{
    char path[320];
    in_dir(path, sizeof path, "owned.txt");
    RPERF_CHECK_EQ(write_text(path, "old"), 0);
    RPERF_CHECK_EQ(chmod(path, 0604), 0);
    int root = geteuid() == 0;
    if (root) /* only root can give a file away; it must come back to 4242 */
        RPERF_CHECK_EQ(chown(path, 4242, 4243), 0);
    struct stat before, after;
    RPERF_CHECK_EQ(stat(path, &before), 0);
    RPERF_CHECK_EQ(write_text(path, "replaced"), 0);
    RPERF_CHECK_EQ(stat(path, &after), 0);
    RPERF_CHECK(S_ISREG(after.st_mode));
    RPERF_CHECK_EQ(after.st_mode & 07777, 0604);
    RPERF_CHECK_EQ(after.st_uid, before.st_uid);
    RPERF_CHECK_EQ(after.st_gid, before.st_gid);
    RPERF_CHECK(after.st_ino != before.st_ino); /* replaced atomically */
    RPERF_CHECK(file_is(path, "replaced"));
    unlink(path);
    RPERF_CHECK_EQ(dir_entries(), 0);
}

RPERF_TEST(file_writer_hard_link_in_place)
{
    char a[320], b[320];
    in_dir(a, sizeof a, "a.txt");
    in_dir(b, sizeof b, "b.txt");
    RPERF_CHECK_EQ(write_text(a, "a much longer old content"), 0);
    RPERF_CHECK_EQ(link(a, b), 0);
    struct stat before, after;
    RPERF_CHECK_EQ(stat(a, &before), 0);
    RPERF_CHECK_EQ(write_text(a, "short"), 0);
    RPERF_CHECK_EQ(stat(a, &after), 0);
    RPERF_CHECK_EQ(after.st_ino, before.st_ino); /* the same file, both names */
    RPERF_CHECK(file_is(b, "short")); /* truncated, not overlaid */
    unlink(a);
    unlink(b);
    RPERF_CHECK_EQ(dir_entries(), 0);
}

/* A FIFO: the writer opens it in place (blocking until the reader, a child
 * process, opens it) and the FIFO stays a FIFO. */
RPERF_TEST(file_writer_fifo_in_place)
{
    char fifo[320], got[320];
    in_dir(fifo, sizeof fifo, "fifo");
    in_dir(got, sizeof got, "got.txt");
    RPERF_CHECK_EQ(mkfifo(fifo, 0600), 0);
    pid_t pid = fork();
    if (pid == 0) {
        int in = open(fifo, O_RDONLY);
        int out = open(got, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        char buf[4096];
        ssize_t n;
        while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof buf)) > 0)
            if (write(out, buf, (size_t)n) != n)
                _exit(2);
        _exit(in >= 0 && out >= 0 ? 0 : 1);
    }
    RPERF_CHECK(pid > 0);
    rperf_writer_t *w;
    RPERF_CHECK_EQ(rperf_writer_file_open(&w, fifo), 0);
    for (int i = 0; i < 20000; i++) /* > a pipe's buffer: the reader drains it */
        rperf_writer_printf(w, "line %d\n", i);
    RPERF_CHECK_EQ(rperf_writer_finish(w), 0);
    rperf_writer_free(w);
    int status = -1;
    RPERF_CHECK_EQ(waitpid(pid, &status, 0), pid);
    RPERF_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    struct stat st;
    RPERF_CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
    size_t len;
    char *s = slurp(got, &len);
    RPERF_CHECK(s && strncmp(s, "line 0\nline 1\n", 14) == 0 && len == 208890);
    free(s);
    unlink(got);
    unlink(fifo);
    RPERF_CHECK_EQ(dir_entries(), 0);
}

/* /dev/fd/N: written to descriptor N, which stays open. */
RPERF_TEST(file_writer_descriptor_path)
{
    int p[2];
    RPERF_CHECK_EQ(pipe(p), 0);
    char path[64];
    snprintf(path, sizeof path, "/dev/fd/%d", p[1]);
    RPERF_CHECK_EQ(write_text(path, "to the pipe"), 0);
    RPERF_CHECK(fcntl(p[1], F_GETFD) >= 0); /* not closed */
    snprintf(path, sizeof path, "/proc/self/fd/%d", p[1]);
    RPERF_CHECK_EQ(write_text(path, "+"), 0);
    close(p[1]);
    char buf[64] = "";
    ssize_t n = read(p[0], buf, sizeof buf - 1);
    RPERF_CHECK_EQ(n, 12);
    RPERF_CHECK_STR(buf, "to the pipe+");
    /* The read end is not open for writing. */
    snprintf(path, sizeof path, "/dev/fd/%d", p[0]);
    char msg[200];
    RPERF_CHECK_EQ(rperf_writer_check_path(path, msg, sizeof msg), -EACCES);
    RPERF_CHECK(strstr(msg, "not open for writing") != NULL);
    close(p[0]);
}

RPERF_TEST(file_writer_char_device_in_place)
{
    char dev[320];
    in_dir(dev, sizeof dev, "mynull");
    if (mknod(dev, S_IFCHR | 0666, makedev(1, 3)) != 0) {
        printf("SKIP file_writer_char_device_in_place: mknod: %s (needs root)\n", strerror(errno));
        return;
    }
    struct stat before, st;
    RPERF_CHECK_EQ(lstat(dev, &before), 0);
    RPERF_CHECK_EQ(rperf_writer_check_path(dev, NULL, 0), 0);
    RPERF_CHECK_EQ(write_text(dev, "thrown away"), 0);
    RPERF_CHECK(lstat(dev, &st) == 0 && S_ISCHR(st.st_mode));
    RPERF_CHECK_EQ(st.st_rdev, makedev(1, 3));
    RPERF_CHECK_EQ(st.st_ino, before.st_ino);
    RPERF_CHECK_EQ(st.st_mode, before.st_mode);
    unlink(dev);
    RPERF_CHECK_EQ(dir_entries(), 0);
}

RPERF_TEST(check_path_at_start)
{
    char path[320], msg[512];
    in_dir(path, sizeof path, "ok.txt");
    RPERF_CHECK_EQ(rperf_writer_check_path(path, msg, sizeof msg), 0);
    RPERF_CHECK_EQ(dir_entries(), 0); /* the probe file is gone */
    RPERF_CHECK_EQ(rperf_writer_check_path(dir, msg, sizeof msg), -EISDIR);
    RPERF_CHECK(strstr(msg, "is a directory") != NULL);
    in_dir(path, sizeof path, "no-such-dir/out.txt");
    RPERF_CHECK_EQ(rperf_writer_check_path(path, msg, sizeof msg), -ENOENT);
    RPERF_CHECK(strstr(msg, "does not exist") != NULL && strstr(msg, "no-such-dir") != NULL);
    RPERF_CHECK_EQ(rperf_writer_check_path("", msg, sizeof msg), -EINVAL);
    /* A symlink to a directory is a directory. */
    char l[320];
    in_dir(l, sizeof l, "dirlink");
    RPERF_CHECK_EQ(symlink(dir, l), 0);
    RPERF_CHECK_EQ(rperf_writer_check_path(l, msg, sizeof msg), -EISDIR);
    rperf_writer_t *w = NULL;
    RPERF_CHECK_EQ(rperf_writer_file_open(&w, l), -EISDIR);
    unlink(l);
    /* A directory where no file can be created: as root, access(2) would say
     * yes to 0555; the probe file says no only when not root. */
    char ro[280];
    in_dir(ro, sizeof ro, "ro");
    RPERF_CHECK_EQ(mkdir(ro, 0555), 0);
    snprintf(path, sizeof path, "%s/out.txt", ro);
    if (geteuid() != 0) {
        RPERF_CHECK_EQ(rperf_writer_check_path(path, msg, sizeof msg), -EACCES);
        RPERF_CHECK(strstr(msg, "cannot create files in") != NULL);
    } else {
        printf("SKIP check_path_at_start (read-only directory): root may write a 0555 directory; "
               "tests/ruby/test_output_targets.rb checks it as an unprivileged child\n");
    }
    rmdir(ro);
    RPERF_CHECK_EQ(dir_entries(), 0);
}

/* Out of descriptors at stop: the spare descriptor reserved at start lets
 * the writer open its file anyway, once. */
RPERF_TEST(spare_descriptor_under_emfile)
{
    char path[320];
    in_dir(path, sizeof path, "emfile.txt");
    struct rlimit old;
    RPERF_CHECK_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
    RPERF_CHECK_EQ(rperf_writer_spare_reserve(), 0);
    RPERF_CHECK_EQ(rperf_writer_spare_reserve(), 0); /* idempotent: still one */
    struct rlimit low = old;
    low.rlim_cur = 64;
    RPERF_CHECK_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
    int fds[64], n = 0;
    while (n < 64 && (fds[n] = open("/dev/null", O_RDONLY)) >= 0)
        n++;
    RPERF_CHECK(n < 64 && errno == EMFILE);
    RPERF_CHECK_EQ(write_text(path, "written anyway"), 0);
    /* The spare is used up: once the process takes the slot it freed, the
     * next open fails as the system says. */
    RPERF_CHECK((fds[n] = open("/dev/null", O_RDONLY)) >= 0);
    n++;
    RPERF_CHECK_EQ(write_text(path, "again"), -EMFILE);
    while (n > 0)
        close(fds[--n]);
    RPERF_CHECK_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
    RPERF_CHECK(file_is(path, "written anyway"));
    unlink(path);
    rperf_writer_spare_release();
    rperf_writer_spare_release(); /* no-op */
    RPERF_CHECK_EQ(dir_entries(), 0);
}

RPERF_TEST(gzip_writer)
{
    rperf_writer_t *mem, *gz;
    RPERF_CHECK_EQ(rperf_writer_memory_open(&mem), 0);
    RPERF_CHECK_EQ(rperf_writer_gzip_open(&gz, mem, -1), 0);
    RPERF_CHECK_EQ(rperf_writer_gzip_open(&gz, NULL, 1), -EINVAL);
    for (int i = 0; i < 50000; i++)
        rperf_writer_printf(gz, "%d,", i);
    RPERF_CHECK_EQ(rperf_writer_finish(gz), 0);
    size_t zlen;
    const unsigned char *z = rperf_writer_memory_data(mem, &zlen);
    RPERF_CHECK(zlen > 20 && z[0] == 0x1f && z[1] == 0x8b);
    uint64_t raw = rperf_writer_bytes(gz);
    unsigned char *out = malloc(raw + 1);
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    inflateInit2(&zs, 15 + 16);
    zs.next_in = (Bytef *)(uintptr_t)z;
    zs.avail_in = (uInt)zlen;
    zs.next_out = out;
    zs.avail_out = (uInt)raw + 1;
    RPERF_CHECK_EQ(inflate(&zs, Z_FINISH), Z_STREAM_END);
    RPERF_CHECK_EQ(zs.total_out, raw);
    RPERF_CHECK(memcmp(out, "0,1,2,3,", 8) == 0);
    inflateEnd(&zs);
    free(out);
    rperf_writer_free(gz);
    rperf_writer_free(mem);
}

/* What a profiled server child writes every window (a gzip file writer:
 * ~400 KiB of buffers and deflate state) never comes from malloc: taken
 * in whichever application arena glibc gives the short-lived writer
 * thread, those blocks would leave free pages there that stay resident,
 * a little more at every window (exporters/writer.c, DESIGN). glibc's own
 * count of what is allocated says how much went through malloc. */
RPERF_TEST(gzip_file_writer_buffers_are_not_malloced)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    char path[512];
    snprintf(path, sizeof path, "%s/window.pb.gz", dir);
    for (int round = 0; round < 3; round++) {
        struct mallinfo2 before = mallinfo2();
        rperf_writer_t *f, *gz;
        RPERF_CHECK_EQ(rperf_writer_file_open(&f, path), 0);
        RPERF_CHECK_EQ(rperf_writer_gzip_open(&gz, f, -1), 0);
        for (int i = 0; i < 100000; i++)
            rperf_writer_printf(gz, "%d,", i * 7919);
        struct mallinfo2 during = mallinfo2();
        size_t used = (during.uordblks + during.hblkhd) - (before.uordblks + before.hblkhd);
        /* the two writer structs and the paths: a few KiB, no 64 KiB block */
        RPERF_CHECK(used < 16 * 1024);
        RPERF_CHECK_EQ(rperf_writer_finish(gz), 0);
        RPERF_CHECK_EQ(rperf_writer_finish(f), 0);
        rperf_writer_free(gz);
        rperf_writer_free(f);
        struct mallinfo2 after = mallinfo2();
        RPERF_CHECK_EQ(after.uordblks + after.hblkhd, before.uordblks + before.hblkhd);
    }
    size_t zlen;
    char *z = slurp(path, &zlen);
    RPERF_CHECK(z && zlen > 20 && (unsigned char)z[0] == 0x1f && (unsigned char)z[1] == 0x8b);
    free(z);
    unlink(path);
#endif
}

RPERF_TEST(gzip_propagates_inner_error)
{
    rperf_writer_t *mem, *gz;
    rperf_writer_memory_open(&mem);
    rperf_writer_gzip_open(&gz, mem, 1);
    rperf_writer_fail(mem, -ENOSPC, "disk full");
    rperf_writer_puts(gz, "data");
    RPERF_CHECK_EQ(rperf_writer_finish(gz), -ENOSPC);
    RPERF_CHECK_STR(rperf_writer_error(gz), "disk full");
    rperf_writer_free(gz);
    rperf_writer_free(mem);
}

RPERF_TEST(registry_builtins)
{
    static const char *names[] = {"pprof", "collapsed", "json", "text", "threads"};
    RPERF_CHECK(rperf_exporter_count() >= 5);
    for (size_t i = 0; i < 5; i++) {
        const rperf_exporter_ops_t *ops = rperf_exporter_find(names[i]);
        RPERF_CHECK(ops != NULL);
        if (!ops)
            continue;
        RPERF_CHECK_STR(ops->name, names[i]);
        RPERF_CHECK_EQ(ops->version, RPERF_EXPORTER_ABI_VERSION);
        RPERF_CHECK(ops->suffix[0] == '.');
        RPERF_CHECK(ops->description[0] != '\0');
        RPERF_CHECK(rperf_exporter_at(i) == ops);
    }
    RPERF_CHECK(rperf_exporter_find("nope") == NULL);
    RPERF_CHECK(rperf_exporter_find(NULL) == NULL);
    RPERF_CHECK(rperf_exporter_at(rperf_exporter_count()) == NULL);
    RPERF_CHECK_EQ(rperf_exporter_find("pprof")->gzip, 1);
}

/* A C exporter that writes some bytes and then fails. */
static int
failing_encode(const rperf_profile_view_t *v, const rperf_export_options_t *o, rperf_writer_t *w)
{
    (void)v;
    (void)o;
    for (int i = 0; i < 20000; i++)
        rperf_writer_puts(w, "partial output ");
    return rperf_writer_fail(w, -EIO, "failing exporter gave up");
}

static const rperf_exporter_ops_t failing = {
    RPERF_EXPORTER_ABI_VERSION, "failing", ".fail", "test: always fails", 0, failing_encode, 0,
};

static int
hello_encode(const rperf_profile_view_t *v, const rperf_export_options_t *o, rperf_writer_t *w)
{
    (void)o;
    return rperf_writer_printf(w, "hello %zu\n", v->sample_count);
}

static const rperf_exporter_ops_t hello = {
    RPERF_EXPORTER_ABI_VERSION, "hello", ".hello", "test: greets", 0, hello_encode, RPERF_EXPORTER_F_TEXT,
};

RPERF_TEST(registry_runtime_registration)
{
    size_t before = rperf_exporter_count();
    RPERF_CHECK_EQ(rperf_exporter_register(&hello), 0);
    RPERF_CHECK_EQ(rperf_exporter_register(&hello), -EEXIST);
    RPERF_CHECK_EQ(rperf_exporter_count(), before + 1);
    RPERF_CHECK(rperf_exporter_find("hello") == &hello);
    rperf_exporter_ops_t bad = hello;
    bad.name = "Bad Name";
    RPERF_CHECK_EQ(rperf_exporter_register(&bad), -EINVAL);
    bad = hello;
    bad.name = "pprof";
    RPERF_CHECK_EQ(rperf_exporter_register(&bad), -EEXIST);
    bad = hello;
    bad.name = "v2";
    bad.version = 99;
    RPERF_CHECK_EQ(rperf_exporter_register(&bad), -EINVAL);
    bad = hello;
    bad.name = "noenc";
    bad.encode = NULL;
    RPERF_CHECK_EQ(rperf_exporter_register(&bad), -EINVAL);
    RPERF_CHECK_EQ(rperf_exporter_register(NULL), -EINVAL);
    rperf_profile_view_t v = fx_view();
    char *s = fx_export("hello", &v, NULL, NULL);
    RPERF_CHECK(s && strcmp(s, "hello 6\n") == 0);
    free(s);
}

RPERF_TEST(registry_full)
{
    static rperf_exporter_ops_t many[RPERF_EXPORTER_MAX_EXTRA + 1];
    static char names[RPERF_EXPORTER_MAX_EXTRA + 1][16];
    int ok = 0, nospc = 0;
    for (int i = 0; i <= RPERF_EXPORTER_MAX_EXTRA; i++) {
        many[i] = hello;
        snprintf(names[i], sizeof names[i], "extra%d", i);
        many[i].name = names[i];
        int rc = rperf_exporter_register(&many[i]);
        ok += rc == 0;
        nospc += rc == -ENOSPC;
    }
    RPERF_CHECK(nospc >= 1);
    RPERF_CHECK(ok >= 1);
}

RPERF_TEST(failing_exporter_leaves_no_file)
{
    RPERF_CHECK_EQ(rperf_exporter_register(&failing), 0);
    char path[320];
    snprintf(path, sizeof path, "%s/never.out", dir);
    rperf_profile_view_t v = fx_view();
    char err[256] = "";
    for (int gz = 0; gz <= 1; gz++) {
        RPERF_CHECK_EQ(rperf_export_to_file(rperf_exporter_find("failing"), &v, NULL, gz, path, err,
                                            sizeof err), -EIO);
        RPERF_CHECK_STR(err, "failing exporter gave up");
        RPERF_CHECK(!exists(path));
        RPERF_CHECK_EQ(dir_entries(), 0);
    }
    unsigned char *data = (unsigned char *)"sentinel";
    size_t len = 0;
    RPERF_CHECK_EQ(rperf_export_to_memory(&failing, &v, NULL, 0, &data, &len, err, sizeof err), -EIO);
    RPERF_CHECK(strcmp((const char *)data, "sentinel") == 0); /* untouched */
    /* A previous good file is kept intact when a later export fails. */
    RPERF_CHECK_EQ(rperf_export_to_file(&rperf_exporter_collapsed, &v, NULL, -1, path, err, sizeof err), 0);
    size_t before_len;
    char *before = slurp(path, &before_len);
    RPERF_CHECK_EQ(rperf_export_to_file(&failing, &v, NULL, -1, path, err, sizeof err), -EIO);
    size_t after_len;
    char *after = slurp(path, &after_len);
    RPERF_CHECK(before && after && before_len == after_len && memcmp(before, after, after_len) == 0);
    free(before);
    free(after);
    unlink(path);
}

RPERF_TEST(export_to_file_pprof_gz)
{
    char path[320];
    snprintf(path, sizeof path, "%s/p.pb.gz", dir);
    rperf_profile_view_t v = fx_view();
    char err[256];
    RPERF_CHECK_EQ(rperf_export_to_file(&rperf_exporter_pprof, &v, NULL, -1, path, err, sizeof err), 0);
    size_t len;
    char *s = slurp(path, &len);
    RPERF_CHECK(s && len > 20 && (unsigned char)s[0] == 0x1f && (unsigned char)s[1] == 0x8b);
    free(s);
    unlink(path);
    RPERF_CHECK_EQ(dir_entries(), 0);
}

int
main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/rperf-writer-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    int rc = RPERF_RUN(RPERF_CASE(memory_writer), RPERF_CASE(buffer_writer_grow_fn),
                       RPERF_CASE(sticky_error),
                       RPERF_CASE(file_writer_atomic), RPERF_CASE(file_writer_unwritable),
                       RPERF_CASE(file_writer_follows_symlinks),
                       RPERF_CASE(file_writer_keeps_owner_and_mode),
                       RPERF_CASE(file_writer_hard_link_in_place),
                       RPERF_CASE(file_writer_fifo_in_place), RPERF_CASE(file_writer_descriptor_path),
                       RPERF_CASE(file_writer_char_device_in_place), RPERF_CASE(check_path_at_start),
                       RPERF_CASE(spare_descriptor_under_emfile),
                       RPERF_CASE(gzip_writer), RPERF_CASE(gzip_file_writer_buffers_are_not_malloced),
                       RPERF_CASE(gzip_propagates_inner_error),
                       RPERF_CASE(registry_builtins), RPERF_CASE(registry_runtime_registration),
                       RPERF_CASE(failing_exporter_leaves_no_file),
                       RPERF_CASE(export_to_file_pprof_gz), RPERF_CASE(registry_full));
    rmdir(dir);
    return rc;
}
