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

static int tl_offsets_check(const uint64_t *offsets, size_t count, const unsigned char *buf,
                            size_t buf_len)
{
    size_t i;
    if (offsets == NULL || (buf == NULL && buf_len > 0)) {
        return TL_EINVAL;
    }
    for (i = 0; i < count; i++) {
        if (offsets[i] > offsets[i + 1]) {
            return TL_EINVAL;
        }
    }
    return offsets[count] <= (uint64_t)buf_len ? TL_OK : TL_EINVAL;
}

int tl_batch_check(const tl_batch *batch)
{
    if (batch == NULL || batch->count > SIZE_MAX / 128) {
        return TL_EINVAL;
    }
    if (tl_offsets_check(batch->kind_offsets, batch->count, batch->kinds, batch->kinds_len) ||
        tl_offsets_check(batch->payload_offsets, batch->count, batch->payloads,
                         batch->payloads_len)) {
        return TL_EINVAL;
    }
    return TL_OK;
}

/* Feed element i's `kind ‖ \0 ‖ payload` to ctx. */
static void tl_feed_typed(tl_sha256_ctx *ctx, const tl_batch *batch, size_t i)
{
    static const unsigned char nul = 0;
    uint64_t k0 = batch->kind_offsets[i], k1 = batch->kind_offsets[i + 1];
    uint64_t p0 = batch->payload_offsets[i], p1 = batch->payload_offsets[i + 1];
    if (k1 > k0) {
        tl_sha256_update(ctx, batch->kinds + k0, (size_t)(k1 - k0));
    }
    tl_sha256_update(ctx, &nul, 1);
    if (p1 > p0) {
        tl_sha256_update(ctx, batch->payloads + p0, (size_t)(p1 - p0));
    }
}

static uint64_t tl_payload_len(const tl_batch *batch, size_t i)
{
    return batch->payload_offsets[i + 1] - batch->payload_offsets[i];
}

/* Exact length of the JSON text of the chunk holding elements [first, last). */
static size_t tl_chunk_text_len(const tl_batch *batch, size_t first, size_t last)
{
    size_t len = 2 + 2 * (last - first - 1);
    size_t i;
    for (i = first; i < last; i++) {
        len += 4 + 64 + 3 + tl_decimal_width(tl_payload_len(batch, i)) + 1;
    }
    return len;
}

/* Write the chunk's JSON text to `text` (TL_CHUNK_TEXT_MAX bytes); return its length. */
static size_t tl_chunk_text(const tl_batch *batch, const char *element_hex, size_t first,
                            size_t last, char *text)
{
    size_t pos = 0;
    size_t i;
    text[pos++] = '[';
    for (i = first; i < last; i++) {
        if (i > first) {
            text[pos++] = ',';
            text[pos++] = ' ';
        }
        memcpy(text + pos, "[\"e-", 4);
        pos += 4;
        memcpy(text + pos, element_hex + 64 * i, 64);
        pos += 64;
        memcpy(text + pos, "\", ", 3);
        pos += 3;
        pos += tl_put_decimal(text + pos, tl_payload_len(batch, i));
        text[pos++] = ']';
    }
    text[pos++] = ']';
    return pos;
}

size_t tl_refs_text_capacity(size_t count)
{
    size_t chunks = count / TL_CHUNK_SIZE + (count % TL_CHUNK_SIZE != 0);
    if (count > (SIZE_MAX - 2 * chunks) / (TL_ENTRY_MAX + 2)) {
        return 0;
    }
    return count * (TL_ENTRY_MAX + 2) + 2 * chunks;
}

int tl_refs(const tl_batch *batch, unsigned features, char *element_hex, char *chunk_hex,
            char *list_hex, char *chunk_text, size_t chunk_text_cap,
            uint64_t *chunk_text_offsets)
{
    char text[TL_CHUNK_TEXT_MAX];
    tl_sha256_ctx ctx;
    size_t n, chunks, i, j;

    if ((features & ~TL_KNOWN_FEATURES) || tl_batch_check(batch) || list_hex == NULL) {
        return TL_EINVAL;
    }
    n = batch->count;
    chunks = n / TL_CHUNK_SIZE + (n % TL_CHUNK_SIZE != 0);
    if (n > 0 && (element_hex == NULL || chunk_hex == NULL)) {
        return TL_EINVAL;
    }
    if (chunk_text != NULL) {
        size_t total = 0;
        if (chunk_text_offsets == NULL) {
            return TL_EINVAL;
        }
        for (j = 0; j < chunks; j++) {
            size_t first = j * TL_CHUNK_SIZE;
            size_t last = first + TL_CHUNK_SIZE < n ? first + TL_CHUNK_SIZE : n;
            total += tl_chunk_text_len(batch, first, last);
        }
        if (total > chunk_text_cap) {
            return TL_ENOSPC;
        }
        chunk_text_offsets[0] = 0;
    }

    for (i = 0; i < n; i++) {
        tl_sha256_init(&ctx, features);
        tl_feed_typed(&ctx, batch, i);
        tl_sha256_final_hex(&ctx, element_hex + 64 * i);
    }

    for (j = 0; j < chunks; j++) {
        size_t first = j * TL_CHUNK_SIZE;
        size_t last = first + TL_CHUNK_SIZE < n ? first + TL_CHUNK_SIZE : n;
        size_t len = tl_chunk_text(batch, element_hex, first, last, text);
        tl_sha256_init(&ctx, features);
        tl_sha256_update(&ctx, text, len);
        tl_sha256_final_hex(&ctx, chunk_hex + 64 * j);
        if (chunk_text != NULL) {
            memcpy(chunk_text + chunk_text_offsets[j], text, len);
            chunk_text_offsets[j + 1] = chunk_text_offsets[j] + len;
        }
    }

    tl_sha256_init(&ctx, features);
    tl_sha256_update(&ctx, "l[", 2);
    for (j = 0; j < chunks; j++) {
        if (j > 0) {
            tl_sha256_update(&ctx, ", ", 2);
        }
        tl_sha256_update(&ctx, "\"c-", 3);
        tl_sha256_update(&ctx, chunk_hex + 64 * j, 64);
        tl_sha256_update(&ctx, "\"", 1);
    }
    tl_sha256_update(&ctx, "]", 1);
    tl_sha256_final_hex(&ctx, list_hex);
    return TL_OK;
}

int tl_value_blob_refs(const tl_batch *batch, unsigned features, char *blob_hex)
{
    tl_sha256_ctx ctx;
    size_t i;
    if ((features & ~TL_KNOWN_FEATURES) || tl_batch_check(batch) ||
        (batch->count > 0 && blob_hex == NULL)) {
        return TL_EINVAL;
    }
    for (i = 0; i < batch->count; i++) {
        tl_sha256_init(&ctx, features);
        tl_sha256_update(&ctx, "v", 1);
        tl_feed_typed(&ctx, batch, i);
        tl_sha256_final_hex(&ctx, blob_hex + 64 * i);
    }
    return TL_OK;
}
