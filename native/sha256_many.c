/*
 * tl_sha256_many: SHA-256 of many messages, two at a time, for the batch
 * functions of refs.c. With SHA-NI the two messages' rounds are interleaved
 * (tl_sha256_runs2_x86 in sha256_x86.c); the portable code hashes them in turn.
 */
#include <string.h>

#include "tl_internal.h"

/*
 * One lane per message in flight. A message is set up once as
 * at most three runs of whole blocks: a first block gathering the short parts
 * and the start of the last part, the rest of the last part read in place, and
 * its tail with the padding (one or two blocks).
 */
typedef struct tl_lane {
    uint32_t state[8];
    tl_runs runs;
    size_t index;
    unsigned char buf[192]; /* [0, 64): the first block; [64, 192): the tail */
} tl_lane;

typedef struct tl_many {
    size_t count, next;
    unsigned features;
    tl_msg_fn describe;
    void *ctx;
    char *hex;
    size_t stride;
} tl_many;

static void tl_runs_push(tl_runs *runs, const unsigned char *ptr, size_t blocks)
{
    runs->ptr[runs->count] = ptr;
    runs->blocks[runs->count] = blocks;
    runs->count++;
}

/*
 * Set the lane up for msg and return 1, or return 0 (nothing done) when the
 * parts before the last non-empty one exceed 64 bytes.
 */
static int tl_lane_setup(tl_lane *lane, const tl_msg *msg)
{
    unsigned last = 4, i;
    size_t prefix = 0, fill = 0, body_len = 0, rest, tail_blocks;
    const unsigned char *body = NULL;
    unsigned char *dst, *tail = lane->buf + 64;
    uint64_t total;
    int head;
    for (i = 4; i-- > 0;) {
        if (msg->len[i] > 0) {
            last = i;
            body = msg->part[i];
            body_len = msg->len[i];
            break;
        }
    }
    for (i = 0; i < last; i++) {
        prefix += msg->len[i];
    }
    if (prefix > 64) {
        return 0;
    }
    total = (uint64_t)prefix + body_len;
    head = prefix > 0 && body_len >= 64 - prefix;
    dst = head ? lane->buf : tail;
    for (i = 0; i < last; i++) {
        if (msg->len[i] > 0) {
            memcpy(dst + fill, msg->part[i], msg->len[i]);
            fill += msg->len[i];
        }
    }
    memcpy(lane->state, tl_sha256_iv, sizeof lane->state);
    lane->runs.cur = lane->runs.count = 0;
    if (head) {
        size_t take = 64 - prefix;
        if (take > 0) {
            memcpy(lane->buf + prefix, body, take);
            body += take;
            body_len -= take;
        }
        tl_runs_push(&lane->runs, lane->buf, 1);
        fill = 0;
    }
    if (body_len >= 64) {
        tl_runs_push(&lane->runs, body, body_len / 64);
    }
    rest = body_len % 64; /* fill + rest < 64 */
    if (rest > 0) {
        memcpy(tail + fill, body + (body_len - rest), rest);
        fill += rest;
    }
    tail[fill++] = 0x80;
    tail_blocks = fill > 56 ? 2 : 1;
    memset(tail + fill, 0, 64 * tail_blocks - 8 - fill);
    tl_store_be32(tail + 64 * tail_blocks - 8, (uint32_t)(total >> 29));
    tl_store_be32(tail + 64 * tail_blocks - 4, (uint32_t)(total << 3));
    tl_runs_push(&lane->runs, tail, tail_blocks);
    return 1;
}

/* Give the lane the next message; 0 when none is left. */
static int tl_lane_fill(tl_many *many, tl_lane *lane, unsigned which)
{
    while (many->next < many->count) {
        size_t index = many->next++;
        tl_msg msg;
        tl_sha256_ctx ctx;
        unsigned i;
        many->describe(many->ctx, index, which, &msg);
        if (tl_lane_setup(lane, &msg)) {
            lane->index = index;
            return 1;
        }
        tl_sha256_init(&ctx, many->features); /* a long kind: stream it on its own */
        for (i = 0; i < 4; i++) {
            tl_sha256_update(&ctx, msg.part[i], msg.len[i]);
        }
        tl_sha256_final_hex(&ctx, many->hex + many->stride * index);
    }
    return 0;
}

/* tl_sha256_runs2_x86 with SHA-NI; else the same contract, the two lanes in turn. */
static void tl_sha256_runs2(unsigned features, uint32_t state_a[8], tl_runs *a,
                            uint32_t state_b[8], tl_runs *b)
{
#if TL_HAVE_X86_SHA
    if (features & TL_HW_SHA) {
        tl_sha256_runs2_x86(state_a, a, state_b, b);
        return;
    }
#endif
    while (a->cur < a->count && b->cur < b->count) {
        size_t n = a->blocks[a->cur] < b->blocks[b->cur] ? a->blocks[a->cur] : b->blocks[b->cur];
        tl_sha256_compress(features, state_a, a->ptr[a->cur], n);
        tl_sha256_compress(features, state_b, b->ptr[b->cur], n);
        a->ptr[a->cur] += 64 * n;
        b->ptr[b->cur] += 64 * n;
        a->blocks[a->cur] -= n;
        b->blocks[b->cur] -= n;
        a->cur += a->blocks[a->cur] == 0;
        b->cur += b->blocks[b->cur] == 0;
    }
}

void tl_sha256_many(size_t count, unsigned features, tl_msg_fn describe, void *ctx, char *hex,
                    size_t stride)
{
    tl_many many;
    tl_lane lanes[2];
    int busy[2];
    unsigned k;
    many.count = count;
    many.next = 0;
    many.features = features;
    many.describe = describe;
    many.ctx = ctx;
    many.hex = hex;
    many.stride = stride;
    busy[0] = tl_lane_fill(&many, &lanes[0], 0);
    busy[1] = busy[0] && tl_lane_fill(&many, &lanes[1], 1);
    while (busy[0] && busy[1]) {
        tl_sha256_runs2(features, lanes[0].state, &lanes[0].runs, lanes[1].state,
                        &lanes[1].runs);
        for (k = 0; k < 2; k++) {
            if (lanes[k].runs.cur == lanes[k].runs.count) {
                tl_sha256_state_hex(lanes[k].state, hex + stride * lanes[k].index);
                busy[k] = tl_lane_fill(&many, &lanes[k], k);
            }
        }
    }
    for (k = 0; k < 2; k++) { /* at most one lane still busy, and no message left */
        tl_lane *lane = &lanes[k];
        if (!busy[k]) {
            continue;
        }
        for (; lane->runs.cur < lane->runs.count; lane->runs.cur++) {
            tl_sha256_compress(features, lane->state, lane->runs.ptr[lane->runs.cur],
                               lane->runs.blocks[lane->runs.cur]);
        }
        tl_sha256_state_hex(lane->state, hex + stride * lane->index);
    }
}
