/*
 * after_io.c — what the first steps of a thread event hook cost right after
 * the thread comes back from a blocking system call (as a Ruby thread does
 * at READY and RESUMED after I/O, where rperf's hooks run inside Ruby's
 * scheduler lock), against the same steps done again at once. Side by
 * side in one run: each round makes a pipe round trip with a peer thread
 * (the reader sleeps in read(2) until the peer answers), then times
 *   clock     one clock_gettime(CLOCK_MONOTONIC), what the hooks read
 *             three times per GVL switch;
 *   spread    a chain of 64 dependent loads, one line per page (each load
 *             waits for the one before, as a hook's do: a thread's state,
 *             then what it points to);
 *   packed    the same chain through 64 lines of one 4 KiB page;
 * each once after the round trip and once more at once. Prints medians in
 * ns (per read, or per line for the chains) and the ratio.
 *
 * On the reference VM (docs/performance.md, "A GVL switch"): a clock read
 * ~80 ns after I/O, ~40 ns again; a line on a page of its own ~22 ns after
 * I/O, ~5 ns again; a line on a page already touched ~5 / ~2.5 ns: after a
 * system call the cost is in clock reads and in distinct pages.
 *
 *   cc -O2 -pthread bench/after_io.c -o /tmp/after_io && /tmp/after_io [rounds]
 *
 * Contexts: a standalone program (no Ruby); main is the reader, peer_main
 * the thread at the other end of the pipes.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

enum { LINES = 64, LINE = 64, PAGE = 4096, MAX_ROUNDS = 100000 };
enum { CLOCK_COLD, CLOCK_AGAIN, SPREAD_COLD, SPREAD_AGAIN, PACKED_COLD, PACKED_AGAIN, NSERIES };

static int to_peer[2], from_peer[2];

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void *peer_main(void *arg)
{
    (void)arg;
    char c;
    while (read(to_peer[0], &c, 1) == 1 && c != 'q')
        if (write(from_peer[1], &c, 1) != 1) break;
    return NULL;
}

static void round_trip(void)
{
    char c = 'x';
    if (write(to_peer[1], &c, 1) != 1 || read(from_peer[0], &c, 1) != 1) {
        perror("after_io: pipe");
        exit(1);
    }
}

/* A clock read's own cost can't be timed with the clock (the timing's
 * first read would warm what the measured one touches): on x86-64 it is
 * timed with the time-stamp counter (rdtscp, waiting for what came before
 * it; scaled to ns by the run's own calibration), elsewhere not at all. */
static int64_t clock_read_ticks(void)
{
#if defined(__x86_64__)
    unsigned aux;
    uint64_t t0 = __rdtscp(&aux);
    (void)now_ns();
    uint64_t t1 = __rdtscp(&aux);
    return (int64_t)(t1 - t0);
#else
    return 0;
#endif
}

static double ticks_per_ns(void)
{
#if defined(__x86_64__)
    unsigned aux;
    int64_t n0 = now_ns();
    uint64_t t0 = __rdtscp(&aux);
    struct timespec nap = { 0, 50000000 };
    nanosleep(&nap, NULL);
    int64_t n1 = now_ns();
    uint64_t t1 = __rdtscp(&aux);
    return (double)(t1 - t0) / (double)(n1 - n0);
#else
    return 0;
#endif
}

/* Follow the chain through LINES lines `stride` bytes apart (each holds
 * the index of the next); the time it took, in ns. */
static int64_t follow(const volatile uint32_t *mem, size_t stride, unsigned *sink)
{
    size_t words = stride / sizeof(uint32_t);
    int64_t t0 = now_ns();
    uint32_t k = 0;
    for (int n = 0; n < LINES; n++) k = mem[(size_t)k * words];
    int64_t t1 = now_ns();
    *sink += k;
    return t1 - t0;
}

/* Link the LINES lines at `stride` into one cycle, in a shuffled order. */
static void link_lines(uint32_t *mem, size_t stride, uint64_t seed)
{
    uint32_t order[LINES];
    for (uint32_t i = 0; i < LINES; i++) order[i] = i;
    for (uint32_t i = LINES - 1; i > 0; i--) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        uint32_t j = (uint32_t)(seed % (i + 1)), x = order[i];
        order[i] = order[j];
        order[j] = x;
    }
    size_t words = stride / sizeof(uint32_t);
    for (int i = 0; i < LINES; i++) mem[(size_t)order[i] * words] = order[(i + 1) % LINES];
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static double median(int64_t *v, int n, int per)
{
    qsort(v, (size_t)n, sizeof v[0], cmp64);
    return (double)v[n / 2] / per;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 20000;
    if (rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "after_io: rounds must be 1..%d\n", MAX_ROUNDS);
        return 2;
    }
    /* the spread chain: the first line of each of LINES pages; the packed
     * one: every line of one more page */
    uint32_t *spread = aligned_alloc(PAGE, (size_t)(LINES + 1) * PAGE);
    int64_t *t[NSERIES];
    int ok = spread != NULL;
    for (int i = 0; i < NSERIES; i++) ok &= (t[i] = malloc(sizeof(int64_t) * (size_t)rounds)) != NULL;
    if (!ok || pipe(to_peer) || pipe(from_peer)) {
        perror("after_io");
        return 1;
    }
    memset(spread, 0, (size_t)(LINES + 1) * PAGE);
    uint32_t *packed = spread + (size_t)LINES * PAGE / sizeof(uint32_t);
    link_lines(spread, PAGE, 0x9e3779b97f4a7c15u);
    link_lines(packed, LINE, 0xc2b2ae3d27d4eb4fu);
    pthread_t peer;
    if (pthread_create(&peer, NULL, peer_main, NULL)) {
        perror("after_io: pthread_create");
        return 1;
    }
    unsigned sink = 0;
    for (int r = 0; r < rounds; r++) {
        (void)follow(spread, PAGE, &sink);            /* both chains in the cache */
        (void)follow(packed, LINE, &sink);
        round_trip();
        t[CLOCK_COLD][r] = clock_read_ticks();        /* a read right after the sleep */
        t[CLOCK_AGAIN][r] = clock_read_ticks();
        round_trip();
        t[SPREAD_COLD][r] = follow(spread, PAGE, &sink);
        t[SPREAD_AGAIN][r] = follow(spread, PAGE, &sink);
        round_trip();
        t[PACKED_COLD][r] = follow(packed, LINE, &sink);
        t[PACKED_AGAIN][r] = follow(packed, LINE, &sink);
    }
    char q = 'q';
    if (write(to_peer[1], &q, 1) != 1) perror("after_io: pipe");
    pthread_join(peer, NULL);
    static const char *const name[] = { "clock read (ns)", "line, one per page (ns)",
                                        "line, packed in one page (ns)" };
    printf("right after a pipe round trip, and again at once (medians of %d rounds)\n", rounds);
    printf("%-32s %10s %10s %8s\n", "", "after I/O", "again", "ratio");
    double tpn = ticks_per_ns();
    for (int i = 0; i < 3; i++) {
        if (i == 0 && tpn <= 0) {
            printf("%-32s %10s\n", name[0], "n/a");
            continue;
        }
        int per = i == 0 ? 1 : LINES;
        double cold = median(t[2 * i], rounds, per), again = median(t[2 * i + 1], rounds, per);
        if (i == 0) cold /= tpn, again /= tpn;
        printf("%-32s %10.1f %10.1f %8.1f\n", name[i], cold, again, again > 0 ? cold / again : 0);
    }
    fprintf(stderr, "(%u)\n", sink & 1);
    for (int i = 0; i < NSERIES; i++) free(t[i]);
    free(spread);
    return 0;
}
