/*
 * proc_stat.c — the kernel's view of a task or process: the state letter
 * (R, S, D, Z, ...) and the name (comm) in a /proc/.../stat line.
 *
 * Context: any thread, no GVL (no Ruby API), no allocation; not for a
 * signal handler (it formats the path with snprintf). The file is opened,
 * read and closed in the call, so no descriptor is held between calls (an
 * application that lists or closes its descriptors never meets one).
 */
#include "rperf_core.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

char rperf_stat_line_state(char *line, size_t len, const char *name, bool *named)
{
    if (len == 0) return 0;
    line[len] = '\0';
    /* "pid (comm) S ...": comm may hold spaces and parentheses, so the
     * state follows the last ')' */
    const char *close_paren = strrchr(line, ')');
    if (name) {
        const char *open_paren = strchr(line, '(');
        size_t n = strlen(name);
        *named = open_paren && close_paren && (size_t)(close_paren - open_paren - 1) == n &&
                 memcmp(open_paren + 1, name, n) == 0;
    }
    return close_paren && close_paren[1] == ' ' ? close_paren[2] : 0;
}

char rperf_proc_state(long pid, long tid, const char *name, bool *named)
{
    char path[64], line[256];
    if (tid > 0) snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
    else snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, line, sizeof line - 1);
    close(fd);
    return n > 0 ? rperf_stat_line_state(line, (size_t)n, name, named) : 0;
}
