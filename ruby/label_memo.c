/*
 * label_memo.c — a memo of the last few Rperf.label applications of each
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
 * Contexts: GVL held, any Ractor. The memo is thread-local to the native
 * thread; M:N threads sharing one only meet between calls (no Ruby call
 * or interrupt check inside a lookup or a store), and every entry is
 * exact for any thread. Lookups and stores run under the table's lock, so
 * the epoch cannot move meanwhile.
 */
#include "label_memo.h"

#include <ruby/encoding.h>

#include <string.h>

#define WAYS 4

typedef struct memo {
    uint32_t epoch;
    bool used;
    uint64_t cur, result;
    rperf_memo_key_t key;
} memo_t;

static _Thread_local memo_t memo[WAYS];
static _Thread_local unsigned memo_next;

static bool key_put(rperf_memo_key_t *k, const void *src, size_t n)
{
    if (k->len + n > sizeof(k->bytes)) return k->ok = false;
    memcpy(k->bytes + k->len, src, n);
    k->len += (uint32_t)n;
    return true;
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
        int enc = rb_enc_get_index(v);
        uint32_t len = (uint32_t)RSTRING_LEN(v);
        if ((long)len != RSTRING_LEN(v) || !key_put(m, "s", 1) || !key_put(m, &enc, sizeof(enc)) ||
            !key_put(m, &len, sizeof(len)) || !key_put(m, RSTRING_PTR(v), len))
            return m->ok = false, ST_STOP;
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

static bool same_key(const rperf_memo_key_t *a, const rperf_memo_key_t *b)
{
    return a->len == b->len && memcmp(a->bytes, b->bytes, a->len) == 0;
}

bool rperf_rb_memo_find_locked(uint32_t epoch, uint64_t cur, const rperf_memo_key_t *k, uint64_t *result)
{
    if (!k->ok) return false;
    for (unsigned i = 0; i < WAYS; i++) {
        const memo_t *m = &memo[i];
        if (m->used && m->epoch == epoch && m->cur == cur && same_key(&m->key, k)) {
            *result = m->result;
            return true;
        }
    }
    return false;
}

void rperf_rb_memo_put_locked(uint32_t epoch, uint64_t cur, const rperf_memo_key_t *k, uint64_t result)
{
    if (!k->ok) return;
    memo_t *m = &memo[memo_next++ % WAYS];
    m->used = true;
    m->epoch = epoch;
    m->cur = cur;
    m->result = result;
    m->key.ok = true;
    m->key.len = k->len;
    memcpy(m->key.bytes, k->bytes, k->len);
}
