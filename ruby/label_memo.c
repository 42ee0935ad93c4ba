/*
 * label_memo.c — a memo of the last 16 Rperf.label applications of each
 * native thread: (table epoch, token of the thread's current set, the
 * labels given) -> token of the merged set. A server labels every request
 * with one of a few sets, and a hit skips the merge, the canonical key
 * (value copies, sorting, hashing) and the table lookup (labels.c).
 *
 * Exact, never stale: an entry holds only for the table epoch it was
 * recorded in (label_table.c moves the epoch at every start and
 * snapshot(clear: true), and only then frees, quarantines or re-assigns
 * ids), and only results found in the table (never a new set or the
 * overflow set, whose every application is counted) are recorded. Tokens
 * name one set for the process's life, so the current set's token stands
 * for its content.
 *
 * Memoised labels: Hashes whose keys are static Symbols and whose values
 * are Strings (encoding and bytes), static Symbols, Integers (Fixnum),
 * nil, true or false, up to RPERF_MEMO_KEY_BYTES in all; anything else
 * takes the full path. Key and value bytes are read without a Ruby call.
 *
 * The memo lives on the heap, one block per native thread that labels
 * (~3 KiB, made at its first store, freed when the native thread exits),
 * found through a pthread key: the extension's thread-local storage must
 * stay small, since its initial-exec variables put all of it in the
 * static TLS block that every later dlopen'ed library shares
 * (docs/architecture.md, "Thread-local storage").
 *
 * Contexts: GVL held, any Ractor, except the pthread key's destructor
 * (free), which runs as the native thread exits. The memo is thread-local
 * to the native thread; M:N threads sharing one only meet between calls (no Ruby call
 * or interrupt check inside a lookup or a store), and every entry is
 * exact for any thread. Lookups and stores run under the table's lock, so
 * the epoch cannot move meanwhile.
 */
#include "label_memo.h"

#include <ruby/encoding.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* 16 recent applications per native thread (an app's endpoints, times the
 * few sets a request starts from): the heads are probed first (6 cache
 * lines), the key bytes compared only where a head matches. */
#define WAYS 16

typedef struct memo_head {
    uint64_t cur, result;
    uint32_t epoch, len;
    bool used;
} memo_head_t;

typedef struct memo {
    memo_head_t heads[WAYS];
    char keys[WAYS][RPERF_MEMO_KEY_BYTES];
    unsigned next;
} memo_t;

static pthread_key_t memo_tls;

/* This native thread's memo; made on request (NULL: out of memory). */
static memo_t *my_memo(bool create)
{
    memo_t *m = pthread_getspecific(memo_tls);
    if (!m && create && (m = calloc(1, sizeof(*m))) != NULL && pthread_setspecific(memo_tls, m) != 0) {
        free(m);
        m = NULL;
    }
    return m;
}

bool rperf_rb_memo_present(void) { return pthread_getspecific(memo_tls) != NULL; }

void rperf_rb_memo_init(void)
{
    if (pthread_key_create(&memo_tls, free) != 0) rb_raise(rb_eLoadError, "rperf: no pthread key left");
}

static bool key_put(rperf_memo_key_t *k, const void *src, size_t n)
{
    if (k->len + n > sizeof(k->bytes)) return k->ok = false;
    memcpy(k->bytes + k->len, src, n);
    k->len += (uint32_t)n;
    return true;
}

/* A String value's bytes: "s", its encoding index, length and bytes. */
static bool key_put_string(rperf_memo_key_t *m, int enc, const char *p, long n)
{
    uint32_t len = (uint32_t)n;
    if ((long)len != n) return m->ok = false;
    return key_put(m, "s", 1) && key_put(m, &enc, sizeof(enc)) && key_put(m, &len, sizeof(len)) &&
           key_put(m, p, len);
}

/* A VALUE that names its object for the process's life: static Symbols,
 * Fixnums, nil, true, false. */
static bool immortal(VALUE v)
{
    return RB_STATIC_SYM_P(v) || RB_FIXNUM_P(v) || NIL_P(v) || v == Qtrue || v == Qfalse;
}

static int key_i(VALUE k, VALUE v, VALUE arg)
{
    rperf_memo_key_t *m = (rperf_memo_key_t *)arg;
    if (!RB_STATIC_SYM_P(k) || !key_put(m, &k, sizeof(k))) return m->ok = false, ST_STOP;
    if (immortal(v)) {
        if (!key_put(m, "v", 1) || !key_put(m, &v, sizeof(v))) return ST_STOP;
    } else if (RB_TYPE_P(v, T_STRING)) {
        if (!key_put_string(m, rb_enc_get_index(v), RSTRING_PTR(v), RSTRING_LEN(v))) return ST_STOP;
    } else {
        return m->ok = false, ST_STOP;
    }
    return ST_CONTINUE;
}

void rperf_rb_memo_key(VALUE labels, rperf_memo_key_t *out)
{
    out->ok = true;
    out->len = 0;
    rb_hash_foreach(labels, key_i, (VALUE)out);
}

void rperf_rb_memo_key_string_pair(VALUE key, int enc, const char *p, long n, rperf_memo_key_t *out)
{
    out->ok = RB_STATIC_SYM_P(key);
    out->len = 0;
    if (out->ok && key_put(out, &key, sizeof(key))) key_put_string(out, enc, p, n);
}

bool rperf_rb_memo_find_locked(uint32_t epoch, uint64_t cur, const rperf_memo_key_t *k, uint64_t *result)
{
    memo_t *m = k->ok ? my_memo(false) : NULL;
    if (!m) return false;
    for (unsigned i = 0; i < WAYS; i++) {
        const memo_head_t *h = &m->heads[i];
        if (h->used && h->len == k->len && h->cur == cur && h->epoch == epoch &&
            memcmp(m->keys[i], k->bytes, k->len) == 0) {
            *result = h->result;
            return true;
        }
    }
    return false;
}

void rperf_rb_memo_put_locked(uint32_t epoch, uint64_t cur, const rperf_memo_key_t *k, uint64_t result)
{
    memo_t *m = k->ok ? my_memo(true) : NULL;
    if (!m) return;
    unsigned i = m->next++ % WAYS;
    m->heads[i] = (memo_head_t){ .cur = cur, .result = result, .epoch = epoch, .len = k->len, .used = true };
    memcpy(m->keys[i], k->bytes, k->len);
}
