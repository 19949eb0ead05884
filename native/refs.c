/*
 * Protocol refs (SPEC §3.1, §3.2): element, chunk and list-blob refs of a list
 * value in one call, and value-blob refs of many payloads.
 *
 * The JSON texts hashed here are byte-identical to Python's json.dumps with
 * default separators. They contain only refs (ASCII hex) and integers, so no
 * escaping can occur.
 */
#include <string.h>

#include "threadloom.h"
#include "tl_internal.h"

/* `["e-` + 64 hex + `", ` + up to 20 digits + `]` */
#define TL_ENTRY_MAX (4 + 64 + 3 + 20 + 1)
/* `[` + 32 entries + 31 `, ` separators + `]` */
#define TL_CHUNK_TEXT_MAX (2 + TL_CHUNK_SIZE * TL_ENTRY_MAX + (TL_CHUNK_SIZE - 1) * 2)

static size_t tl_decimal_width(uint64_t v)
{
    size_t width = 1;
    while (v >= 10) {
        v /= 10;
        width++;
    }
    return width;
}

static size_t tl_put_decimal(char *out, uint64_t v)
{
    size_t width = tl_decimal_width(v);
    size_t i = width;
    do {
        out[--i] = (char)('0' + (int)(v % 10));
        v /= 10;
    } while (v);
    return width;
}

static int tl_lengths_check(const uint64_t *lengths, size_t count, size_t buf_len)
{
    uint64_t left = (uint64_t)buf_len;
    size_t i;
    for (i = 0; i < count; i++) {
        if (lengths[i] > left) {
            return TL_EINVAL;
        }
        left -= lengths[i];
    }
    return TL_OK;
}

int tl_batch_check(const tl_batch *batch)
{
    if (batch == NULL || batch->count > SIZE_MAX / 128) {
        return TL_EINVAL;
    }
    if ((batch->kinds == NULL && batch->kinds_len > 0) ||
        (batch->payloads == NULL && batch->payloads_len > 0) ||
        (batch->payload_lengths == NULL && batch->count > 0)) {
        return TL_EINVAL;
    }
    if ((batch->kind_lengths != NULL &&
         tl_lengths_check(batch->kind_lengths, batch->count, batch->kinds_len)) ||
        (batch->count > 0 &&
         tl_lengths_check(batch->payload_lengths, batch->count, batch->payloads_len))) {
        return TL_EINVAL;
    }
    return TL_OK;
}

/* The typed messages `domain ‖ kind_i ‖ \0 ‖ payload_i`, for tl_sha256_many. */
typedef struct tl_elements {
    const tl_batch *batch;
    const unsigned char *domain;
    size_t domain_len;
    size_t kind_at;    /* where the next element's kind starts in batch->kinds */
    size_t payload_at; /* where its payload starts in batch->payloads */
} tl_elements;

static const unsigned char tl_nul = 0;

static void tl_element_msg(void *ctx, size_t i, unsigned lane, tl_msg *msg)
{
    tl_elements *elements = (tl_elements *)ctx;
    const tl_batch *batch = elements->batch;
    size_t kind_len = batch->kind_lengths ? (size_t)batch->kind_lengths[i] : batch->kinds_len;
    size_t payload_len = (size_t)batch->payload_lengths[i];
    (void)lane; /* every part lives in the caller's buffers */
    msg->part[0] = elements->domain;
    msg->len[0] = elements->domain_len;
    msg->part[1] = kind_len ? batch->kinds + elements->kind_at : NULL;
    msg->len[1] = kind_len;
    msg->part[2] = &tl_nul;
    msg->len[2] = 1;
    msg->part[3] = payload_len ? batch->payloads + elements->payload_at : NULL;
    msg->len[3] = payload_len;
    if (batch->kind_lengths) {
        elements->kind_at += kind_len;
    }
    elements->payload_at += payload_len;
}

/* Write the prefix and the newline of `count` refs (TL_REF_STRIDE layout). */
static void tl_ref_lines(char *refs, char letter, size_t count)
{
    size_t i;
    for (i = 0; i < count; i++) {
        refs[TL_REF_STRIDE * i] = letter;
        refs[TL_REF_STRIDE * i + 1] = '-';
        refs[TL_REF_STRIDE * i + 66] = '\n';
    }
}

/* Exact length of the JSON text of the chunk holding elements [first, last). */
static size_t tl_chunk_text_len(const tl_batch *batch, size_t first, size_t last)
{
    size_t len = 2 + 2 * (last - first - 1);
    size_t i;
    for (i = first; i < last; i++) {
        len += 2 + 66 + 3 + tl_decimal_width(batch->payload_lengths[i]) + 1;
    }
    return len;
}

/* Write the JSON text of the chunk of elements [first, last) to `text`; return its length. */
static size_t tl_chunk_text(const tl_batch *batch, const char *refs, size_t first, size_t last,
                            char *text)
{
    size_t pos = 0;
    size_t i;
    text[pos++] = '[';
    for (i = first; i < last; i++) {
        if (i > first) {
            text[pos++] = ',';
            text[pos++] = ' ';
        }
        text[pos++] = '[';
        text[pos++] = '"';
        memcpy(text + pos, refs + TL_REF_STRIDE * i, 66); /* `e-<hex>` */
        pos += 66;
        memcpy(text + pos, "\", ", 3);
        pos += 3;
        pos += tl_put_decimal(text + pos, batch->payload_lengths[i]);
        text[pos++] = ']';
    }
    text[pos++] = ']';
    return pos;
}

/* The chunk texts as messages for tl_sha256_many, built in `out` or in scratch. */
typedef struct tl_chunks {
    const tl_batch *batch;
    const char *refs;
    char *out;         /* the caller's chunk_text, or NULL */
    uint64_t *offsets; /* the caller's chunk_text_offsets when out is set */
    char scratch[2][TL_CHUNK_TEXT_MAX];
} tl_chunks;

static void tl_chunk_msg(void *ctx, size_t j, unsigned lane, tl_msg *msg)
{
    tl_chunks *chunks = (tl_chunks *)ctx;
    size_t n = chunks->batch->count, first = j * TL_CHUNK_SIZE;
    size_t last = first + TL_CHUNK_SIZE < n ? first + TL_CHUNK_SIZE : n;
    char *text = chunks->out ? chunks->out + chunks->offsets[j] : chunks->scratch[lane];
    size_t len = tl_chunk_text(chunks->batch, chunks->refs, first, last, text);
    if (chunks->out) {
        chunks->offsets[j + 1] = chunks->offsets[j] + len;
    }
    memset(msg, 0, sizeof *msg);
    msg->part[0] = (const unsigned char *)text;
    msg->len[0] = len;
}

size_t tl_refs_text_capacity(size_t count)
{
    size_t chunks = count / TL_CHUNK_SIZE + (count % TL_CHUNK_SIZE != 0);
    if (count > (SIZE_MAX - 2 * chunks) / (TL_ENTRY_MAX + 2)) {
        return 0;
    }
    return count * (TL_ENTRY_MAX + 2) + 2 * chunks;
}

int tl_refs(const tl_batch *batch, unsigned features, char *refs, char *chunk_text,
            size_t chunk_text_cap, uint64_t *chunk_text_offsets)
{
    tl_elements elements = {NULL, NULL, 0, 0, 0};
    tl_chunks chunks;
    tl_sha256_ctx ctx;
    size_t n, count, j;
    char *chunk_refs, *list_ref;

    if ((features & ~TL_KNOWN_FEATURES) || tl_batch_check(batch) || refs == NULL) {
        return TL_EINVAL;
    }
    n = batch->count;
    count = n / TL_CHUNK_SIZE + (n % TL_CHUNK_SIZE != 0);
    if (chunk_text != NULL) {
        size_t total = 0;
        if (chunk_text_offsets == NULL) {
            return TL_EINVAL;
        }
        for (j = 0; j < count; j++) {
            size_t first = j * TL_CHUNK_SIZE;
            size_t last = first + TL_CHUNK_SIZE < n ? first + TL_CHUNK_SIZE : n;
            total += tl_chunk_text_len(batch, first, last);
        }
        if (total > chunk_text_cap) {
            return TL_ENOSPC;
        }
        chunk_text_offsets[0] = 0;
    }
    chunk_refs = refs + TL_REF_STRIDE * n;
    list_ref = chunk_refs + TL_REF_STRIDE * count;
    tl_ref_lines(refs, 'e', n);
    tl_ref_lines(chunk_refs, 'c', count);
    tl_ref_lines(list_ref, 'b', 1);

    elements.batch = batch;
    tl_sha256_many(n, features, tl_element_msg, &elements, refs + 2, TL_REF_STRIDE);

    chunks.batch = batch;
    chunks.refs = refs;
    chunks.out = chunk_text;
    chunks.offsets = chunk_text_offsets;
    tl_sha256_many(count, features, tl_chunk_msg, &chunks, chunk_refs + 2, TL_REF_STRIDE);

    tl_sha256_init(&ctx, features);
    tl_sha256_update(&ctx, "l[", 2);
    for (j = 0; j < count; j++) {
        tl_sha256_update(&ctx, j > 0 ? ", \"" : "\"", j > 0 ? 3 : 1);
        tl_sha256_update(&ctx, chunk_refs + TL_REF_STRIDE * j, 66); /* `c-<hex>` */
        tl_sha256_update(&ctx, "\"", 1);
    }
    tl_sha256_update(&ctx, "]", 1);
    tl_sha256_final_hex(&ctx, list_ref + 2);
    return TL_OK;
}

int tl_value_blob_refs(const tl_batch *batch, unsigned features, char *refs)
{
    static const unsigned char domain = 'v';
    tl_elements elements = {NULL, NULL, 0, 0, 0};
    if ((features & ~TL_KNOWN_FEATURES) || tl_batch_check(batch) ||
        (batch->count > 0 && refs == NULL)) {
        return TL_EINVAL;
    }
    tl_ref_lines(refs, 'b', batch->count);
    elements.batch = batch;
    elements.domain = &domain;
    elements.domain_len = 1;
    tl_sha256_many(batch->count, features, tl_element_msg, &elements, refs + 2, TL_REF_STRIDE);
    return TL_OK;
}
