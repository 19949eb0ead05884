/*
 * Test driver: runs the C core on commands read from stdin, one result line per
 * command, so tests/core/test_sanitizers.py can run golden vectors through an
 * AddressSanitizer + UBSan build without loading it into Python.
 *
 * Tokens are separated by whitespace; byte strings are hex, `-` is empty.
 *   sha <hw|0> <hex>                         -> digest hex
 *   refs <hw|0> <n> (<kind> <payload>){n}     -> elements chunks list texts
 *   vblob <hw|0> <n> (<kind> <payload>){n}    -> blob refs
 *   cdc <min> <avg> <max> <hex>               -> cuts
 *   blk <hw|0> <min> <avg> <max> <hex>        -> cuts keys (tl_cdc_blocks)
 *   spans <hex>                               -> offsets, or the negative code
 *   vec <hw|0> <metric> <dims> <k> <query> <matrix> <centroids>
 *       -> scores (%.17g) nearest top-k means-hex (means of the matrix rows
 *          grouped by their nearest centroid, not normalized)
 * Lists print comma-separated, `-` when empty; a negative return prints `E<code>`.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "threadloom.h"

static char *next_token(char **cursor)
{
    char *p = *cursor, *start;
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') {
        p++;
    }
    if (*p == '\0') {
        return NULL;
    }
    start = p;
    while (*p && *p != ' ' && *p != '\n' && *p != '\r' && *p != '\t') {
        p++;
    }
    if (*p) {
        *p++ = '\0';
    }
    *cursor = p;
    return start;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Decode hex into a fresh exact-size allocation (never NULL-sized reads past the end). */
static unsigned char *unhex(const char *hex, size_t *len)
{
    size_t n = strcmp(hex, "-") == 0 ? 0 : strlen(hex) / 2, i;
    unsigned char *out = malloc(n ? n : 1);
    if (out == NULL) {
        exit(3);
    }
    for (i = 0; i < n; i++) {
        int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            exit(4);
        }
        out[i] = (unsigned char)(hi * 16 + lo);
    }
    *len = n;
    return out;
}

static void print_hex(const unsigned char *data, size_t len)
{
    size_t i;
    if (len == 0) {
        fputs("-", stdout);
    }
    for (i = 0; i < len; i++) {
        printf("%02x", data[i]);
    }
}

/*
 * Print the hex of `count` refs in the TL_REF_STRIDE layout (prefix `<letter>-`,
 * 64 hex, '\n'), comma-separated; a ref with another prefix or separator prints
 * `BADLAYOUT` instead of its hex.
 */
static void print_refs(const char *refs, size_t count, char letter)
{
    size_t i;
    if (count == 0) {
        fputs("-", stdout);
    }
    for (i = 0; i < count; i++) {
        const char *ref = refs + (size_t)TL_REF_STRIDE * i;
        if (ref[0] != letter || ref[1] != '-' || ref[66] != '\n') {
            printf("%sBADLAYOUT", i ? "," : "");
        } else {
            printf("%s%.64s", i ? "," : "", ref + 2);
        }
    }
}

static void print_u64s(const uint64_t *values, size_t count)
{
    size_t i;
    if (count == 0) {
        fputs("-", stdout);
    }
    for (i = 0; i < count; i++) {
        printf("%s%llu", i ? "," : "", (unsigned long long)values[i]);
    }
}

static unsigned features(const char *token)
{
    return strcmp(token, "hw") == 0 ? tl_cpu_features() : 0u;
}

/*
 * Read n (kind, payload) pairs into exactly sized buffers; caller frees. When every
 * kind is the same (and n > 0) the batch shares it: kinds holds that one kind and
 * kind_lengths is NULL, as threadloom.core._native passes the common case.
 */
static void read_batch(char **cursor, tl_batch *batch, uint64_t **kl, uint64_t **pl)
{
    size_t n = strtoul(next_token(cursor), NULL, 10), i, kinds_len = 0, payloads_len = 0;
    unsigned char **kinds = malloc((n + 1) * sizeof *kinds);
    unsigned char **payloads = malloc((n + 1) * sizeof *payloads);
    unsigned char *kbuf, *pbuf;
    int shared = n > 0;
    *kl = malloc((n + 1) * sizeof **kl);
    *pl = malloc((n + 1) * sizeof **pl);
    for (i = 0; i < n; i++) {
        size_t klen, plen;
        kinds[i] = unhex(next_token(cursor), &klen);
        payloads[i] = unhex(next_token(cursor), &plen);
        (*kl)[i] = klen;
        (*pl)[i] = plen;
        kinds_len += klen;
        payloads_len += plen;
        shared = shared && klen == (*kl)[0] && (klen == 0 || !memcmp(kinds[i], kinds[0], klen));
    }
    if (shared) {
        kinds_len = (size_t)(*kl)[0];
    }
    kbuf = malloc(kinds_len ? kinds_len : 1);
    pbuf = malloc(payloads_len ? payloads_len : 1);
    kinds_len = payloads_len = 0;
    for (i = 0; i < n; i++) {
        size_t klen = (size_t)(*kl)[i], plen = (size_t)(*pl)[i];
        if (klen && (!shared || i == 0)) {
            memcpy(kbuf + kinds_len, kinds[i], klen);
            kinds_len += klen;
        }
        if (plen) {
            memcpy(pbuf + payloads_len, payloads[i], plen);
            payloads_len += plen;
        }
        free(kinds[i]);
        free(payloads[i]);
    }
    if (shared) {
        free(*kl);
        *kl = NULL;
    }
    free(kinds);
    free(payloads);
    batch->count = n;
    batch->kinds = kbuf;
    batch->kinds_len = kinds_len;
    batch->kind_lengths = *kl;
    batch->payloads = pbuf;
    batch->payloads_len = payloads_len;
    batch->payload_lengths = *pl;
}

static void free_batch(tl_batch *batch, uint64_t *kl, uint64_t *pl)
{
    free((void *)batch->kinds);
    free((void *)batch->payloads);
    free(kl);
    free(pl);
}

static void run_refs(char **cursor)
{
    unsigned hw = features(next_token(cursor));
    tl_batch batch;
    uint64_t *kl, *pl, *text_offsets;
    size_t chunks, cap, j;
    char *refs, *text;
    int rc;
    read_batch(cursor, &batch, &kl, &pl);
    chunks = (batch.count + TL_CHUNK_SIZE - 1) / TL_CHUNK_SIZE;
    cap = tl_refs_text_capacity(batch.count);
    refs = malloc((size_t)TL_REF_STRIDE * (batch.count + chunks + 1));
    text = malloc(cap + 1);
    text_offsets = malloc((chunks + 1) * sizeof *text_offsets);
    rc = tl_refs(&batch, hw, refs, text, cap, text_offsets);
    if (rc != TL_OK) {
        printf("E%d", rc);
    } else {
        print_refs(refs, batch.count, 'e');
        putchar(' ');
        print_refs(refs + (size_t)TL_REF_STRIDE * batch.count, chunks, 'c');
        putchar(' ');
        print_refs(refs + (size_t)TL_REF_STRIDE * (batch.count + chunks), 1, 'b');
        putchar(' ');
        if (chunks == 0) {
            fputs("-", stdout);
        }
        for (j = 0; j < chunks; j++) {
            if (j) putchar(',');
            print_hex((unsigned char *)text + text_offsets[j],
                      (size_t)(text_offsets[j + 1] - text_offsets[j]));
        }
    }
    free(refs);
    free(text);
    free(text_offsets);
    free_batch(&batch, kl, pl);
}

static void run_vblob(char **cursor)
{
    unsigned hw = features(next_token(cursor));
    tl_batch batch;
    uint64_t *kl, *pl;
    char *refs;
    int rc;
    read_batch(cursor, &batch, &kl, &pl);
    refs = malloc((size_t)TL_REF_STRIDE * batch.count + 1);
    rc = tl_value_blob_refs(&batch, hw, refs);
    if (rc != TL_OK) {
        printf("E%d", rc);
    } else {
        print_refs(refs, batch.count, 'b');
    }
    free(refs);
    free_batch(&batch, kl, pl);
}

/* Every vector function on one case, each buffer allocated to its exact size. */
static void run_vec(char **cursor)
{
    unsigned hw = features(next_token(cursor));
    int metric = atoi(next_token(cursor));
    size_t dims = strtoul(next_token(cursor), NULL, 10);
    size_t k = strtoul(next_token(cursor), NULL, 10), qlen, mlen, clen, n, i;
    unsigned char *query = unhex(next_token(cursor), &qlen);
    unsigned char *matrix = unhex(next_token(cursor), &mlen);
    unsigned char *centroids = unhex(next_token(cursor), &clen);
    double *scores, *sums;
    uint32_t *nearest;
    uint64_t *top, *counts;
    float *means;
    int64_t count;
    int rc;
    n = mlen / (4 * dims);
    scores = malloc((n ? n : 1) * sizeof *scores);
    nearest = malloc((n ? n : 1) * sizeof *nearest);
    top = malloc((k ? k : 1) * sizeof *top);
    sums = malloc(k * dims * sizeof *sums);
    means = malloc(k * dims * sizeof *means);
    counts = malloc(k * sizeof *counts);
    rc = tl_vector_scores((const float *)query, (const float *)matrix, n, dims, metric, hw, scores);
    if (rc == TL_OK) {
        rc = tl_vector_nearest((const float *)matrix, n, (const float *)centroids, k, dims,
                               metric, hw, nearest);
    }
    count = rc == TL_OK ? tl_vector_top(scores, NULL, n, k, top) : rc;
    if (count >= 0) {
        rc = tl_vector_means((const float *)matrix, n, nearest, k, dims, 0, sums, means, counts);
    }
    if (count < 0 || rc != TL_OK) {
        printf("E%d", count < 0 ? (int)count : rc);
    } else {
        for (i = 0; i < n; i++) printf("%s%.17g", i ? "," : "", scores[i]);
        fputs(n ? " " : "- ", stdout);
        for (i = 0; i < n; i++) printf("%s%u", i ? "," : "", (unsigned)nearest[i]);
        fputs(n ? " " : "- ", stdout);
        print_u64s(top, (size_t)count);
        putchar(' ');
        print_hex((const unsigned char *)means, k * dims * sizeof *means);
    }
    free(query);
    free(matrix);
    free(centroids);
    free(scores);
    free(nearest);
    free(top);
    free(sums);
    free(means);
    free(counts);
}

/* tl_vector_chunk_bounds over one chunk body of exactly its size (ids, items 1000 + i,
 * params, codes; this driver runs on little-endian hosts): the same bounds as `expected`. */
static int chunk_bounds_agree(const int8_t *qcodes, const double *qparams, const int8_t *codes,
                              const double *params, size_t n, size_t dims, int metric,
                              unsigned hw, const double *expected)
{
    size_t size = n * (40 + dims), i;
    unsigned char *body = malloc(size);
    int64_t *items = malloc(n * sizeof *items);
    double *bounds = malloc(n * sizeof *bounds);
    uint64_t count = n;
    int ok;
    for (i = 0; i < n; i++) {
        int64_t id = (int64_t)i, item = 1000 + (int64_t)i;
        memcpy(body + 8 * i, &id, 8);
        memcpy(body + 8 * n + 8 * i, &item, 8);
    }
    memcpy(body + 16 * n, params, 24 * n);
    memcpy(body + 40 * n, codes, n * dims);
    ok = tl_vector_chunk_bounds(qcodes, qparams, body, size, &count, 1, dims, metric, hw, items,
                                bounds) == TL_OK;
    for (i = 0; ok && i < n; i++) {
        ok = items[i] == 1000 + (int64_t)i && memcmp(&bounds[i], &expected[i], 8) == 0;
    }
    free(body);
    free(items);
    free(bounds);
    return ok;
}

/* tl_vector_quantize of a query and a matrix, then tl_vector_bounds, buffers exact-sized:
 * prints the codes (hex), the params and the bounds (%.17g, comma-separated). */
static void run_qnt(char **cursor)
{
    unsigned hw = features(next_token(cursor));
    int metric = atoi(next_token(cursor));
    size_t dims = strtoul(next_token(cursor), NULL, 10), qlen, mlen, n, i;
    unsigned char *query = unhex(next_token(cursor), &qlen);
    unsigned char *matrix = unhex(next_token(cursor), &mlen);
    int8_t *qcodes = malloc(dims), *codes;
    double qparams[3], *params, *bounds;
    int rc;
    n = mlen / (4 * dims);
    codes = malloc(n > 0 ? n * dims : 1);
    params = malloc((n ? n : 1) * 3 * sizeof *params);
    bounds = malloc((n ? n : 1) * sizeof *bounds);
    rc = tl_vector_quantize((const float *)query, 1, dims, qcodes, qparams);
    if (rc == TL_OK) {
        rc = tl_vector_quantize((const float *)matrix, n, dims, codes, params);
    }
    if (rc == TL_OK) {
        rc = tl_vector_bounds(qcodes, qparams, codes, params, n, dims, metric, hw, bounds);
    }
    if (rc == TL_OK && n > 0 && !chunk_bounds_agree(qcodes, qparams, codes, params, n, dims,
                                                     metric, hw, bounds)) {
        rc = -100; /* the chunk kernel disagrees with tl_vector_bounds */
    }
    if (rc != TL_OK) {
        printf("E%d", rc);
    } else {
        print_hex((const unsigned char *)codes, n * dims);
        putchar(' ');
        for (i = 0; i < 3 * n; i++) printf("%s%.17g", i ? "," : "", params[i]);
        fputs(n ? " " : "- ", stdout);
        for (i = 0; i < n; i++) printf("%s%.17g", i ? "," : "", bounds[i]);
        if (!n) putchar('-');
    }
    free(query);
    free(matrix);
    free(qcodes);
    free(codes);
    free(params);
    free(bounds);
}

/* pln: tl_vector_quantize of a query and a matrix, their planes, the coarse bounds and
 * the refinement of all of them, buffers exact-sized: prints the coarse bounds, the
 * bounds and the lower bounds (%.17g, comma-separated), then how many reach -inf. */
static void run_planes(char **cursor)
{
    unsigned hw = features(next_token(cursor));
    int metric = atoi(next_token(cursor));
    size_t dims = strtoul(next_token(cursor), NULL, 10), qlen, mlen, n, m, i, w;
    unsigned char *query = unhex(next_token(cursor), &qlen);
    unsigned char *matrix = unhex(next_token(cursor), &mlen);
    int8_t *qcodes = malloc(dims), *split, *codes;
    uint8_t *high, *low;
    double qparams[3], *params, *spread, *coarse, *bounds, *lows;
    double *tight, *tbounds, *trefined, *tlows;
    uint8_t *tops;
    int64_t *raw, *traw, rc, rc2 = TL_OK;
    w = (dims + 1) / 2;
    n = mlen / (4 * dims);
    m = n ? n : 1;
    split = malloc(2 * w);
    codes = malloc(m * dims);
    high = malloc(m * w);
    low = malloc(m * w);
    params = malloc(m * 3 * sizeof *params);
    spread = malloc(m * sizeof *spread);
    coarse = malloc(m * sizeof *coarse);
    bounds = malloc(m * sizeof *bounds);
    lows = malloc(m * sizeof *lows);
    raw = malloc(m * sizeof *raw);
    rc = tl_vector_quantize((const float *)query, 1, dims, qcodes, qparams);
    for (i = 0; i < 2 * w; i++) {
        split[i] = i < w ? qcodes[2 * i] : (2 * (i - w) + 1 < dims ? qcodes[2 * (i - w) + 1] : 0);
    }
    if (rc == TL_OK) rc = tl_vector_quantize((const float *)matrix, n, dims, codes, params);
    if (rc == TL_OK) rc = tl_vector_planes(codes, n, dims, high, low, spread);
    if (rc == TL_OK) {
        rc = tl_vector_coarse_bounds(split, qparams, high, params, spread, n, dims, metric, hw,
                                     coarse, raw);
    }
    for (i = 0; i < n; i++) bounds[i] = lows[i] = coarse[i];
    if (rc == TL_OK) {
        rc = tl_vector_refine(split, qparams, raw, low, params, n, dims, metric, hw, -HUGE_VAL,
                              HUGE_VAL, coarse, bounds, lows);
    }
    /* The tight pass: top bits, tight bounds and their refinement (exact-sized too). */
    tops = malloc(m * 32 * ((w + 127) / 128));
    tight = malloc(m * sizeof *tight);
    tbounds = malloc(m * sizeof *tbounds);
    trefined = malloc(m * sizeof *trefined);
    tlows = malloc(m * sizeof *tlows);
    traw = malloc(m * sizeof *traw);
    if (rc >= 0) rc2 = tl_vector_tops(codes, n, dims, tops, tight);
    if (rc >= 0 && rc2 == TL_OK) {
        rc2 = tl_vector_tight_bounds(split, qparams, high, tops, params, tight, n, dims, metric,
                                     hw, tbounds, traw);
    }
    for (i = 0; i < n; i++) trefined[i] = tlows[i] = tbounds[i];
    if (rc >= 0 && rc2 == TL_OK) {
        rc2 = tl_vector_refine_tight(split, qparams, traw, low, params, n, dims, metric, hw,
                                     -HUGE_VAL, HUGE_VAL, tbounds, trefined, tlows);
    }
    if (rc < 0 || rc2 < 0) {
        printf("E%d", (int)(rc < 0 ? rc : rc2));
    } else {
        for (i = 0; i < n; i++) printf("%s%.17g", i ? "," : "", coarse[i]);
        fputs(n ? " " : "- ", stdout);
        for (i = 0; i < n; i++) printf("%s%.17g", i ? "," : "", bounds[i]);
        fputs(n ? " " : "- ", stdout);
        for (i = 0; i < n; i++) printf("%s%.17g", i ? "," : "", lows[i]);
        printf("%s %d ", n ? "" : "-", (int)rc);
        for (i = 0; i < n; i++) printf("%s%.17g", i ? "," : "", tbounds[i]);
        fputs(n ? " " : "- ", stdout);
        for (i = 0; i < n; i++) printf("%s%.17g", i ? "," : "", trefined[i]);
        fputs(n ? "" : "-", stdout);
    }
    free(tops);
    free(tight);
    free(tbounds);
    free(trefined);
    free(tlows);
    free(traw);
    free(query);
    free(matrix);
    free(qcodes);
    free(split);
    free(codes);
    free(high);
    free(low);
    free(params);
    free(spread);
    free(coarse);
    free(bounds);
    free(lows);
    free(raw);
}

/* blk: the blocks of a buffer and their BLAKE3 keys, buffers of their exact size. */
static void run_blocks(char **cursor)
{
    unsigned hw = features(next_token(cursor));
    size_t min = strtoul(next_token(cursor), NULL, 10);
    size_t avg = strtoul(next_token(cursor), NULL, 10);
    size_t max = strtoul(next_token(cursor), NULL, 10), len, i;
    unsigned char *data = unhex(next_token(cursor), &len);
    size_t room = min ? len / min + 1 : 1;
    uint64_t *cuts = malloc(room * sizeof *cuts);
    unsigned char *keys = malloc(room * 32);
    int64_t count = tl_cdc_blocks(data, len, min, avg, max, hw, cuts, room, keys);
    if (count < 0) {
        printf("E%d", (int)count);
    } else {
        print_u64s(cuts, (size_t)count);
        putchar(' ');
        if (count == 0) {
            fputs("-", stdout);
        }
        for (i = 0; i < (size_t)count; i++) {
            if (i) putchar(',');
            print_hex(keys + 32 * i, 32);
        }
    }
    free(keys);
    free(cuts);
    free(data);
}

int main(void)
{
    size_t size = 0, cap = 1 << 16, n;
    char *input = malloc(cap), *cursor, *command;
    while ((n = fread(input + size, 1, cap - size - 1, stdin)) > 0) {
        size += n;
        if (cap - size - 1 == 0) {
            cap *= 2;
            input = realloc(input, cap);
        }
    }
    input[size] = '\0';
    cursor = input;
    while ((command = next_token(&cursor)) != NULL) {
        if (strcmp(command, "sha") == 0) {
            unsigned hw = features(next_token(&cursor));
            size_t len;
            unsigned char *data = unhex(next_token(&cursor), &len), digest[32];
            int rc = tl_sha256(data, len, hw, digest);
            if (rc) printf("E%d", rc); else print_hex(digest, 32);
            free(data);
        } else if (strcmp(command, "refs") == 0) {
            run_refs(&cursor);
        } else if (strcmp(command, "vblob") == 0) {
            run_vblob(&cursor);
        } else if (strcmp(command, "cdc") == 0) {
            size_t min = strtoul(next_token(&cursor), NULL, 10);
            size_t avg = strtoul(next_token(&cursor), NULL, 10);
            size_t max = strtoul(next_token(&cursor), NULL, 10), len;
            unsigned char *data = unhex(next_token(&cursor), &len);
            size_t room = min ? len / min + 1 : 1;
            uint64_t *cuts = malloc(room * sizeof *cuts);
            int64_t count = tl_cdc_cuts(data, len, min, avg, max, cuts, room);
            if (count < 0) printf("E%d", (int)count); else print_u64s(cuts, (size_t)count);
            free(cuts);
            free(data);
        } else if (strcmp(command, "blk") == 0) {
            run_blocks(&cursor);
        } else if (strcmp(command, "pln") == 0) {
            run_planes(&cursor);
        } else if (strcmp(command, "qnt") == 0) {
            run_qnt(&cursor);
        } else if (strcmp(command, "vec") == 0) {
            run_vec(&cursor);
        } else if (strcmp(command, "spans") == 0) {
            size_t len;
            unsigned char *data = unhex(next_token(&cursor), &len);
            int64_t count = tl_msgpack_array_spans(data, len, NULL, 0);
            if (count >= 0) {
                uint64_t *offsets = malloc(((size_t)count + 1) * sizeof *offsets);
                count = tl_msgpack_array_spans(data, len, offsets, (size_t)count + 1);
                if (count >= 0) print_u64s(offsets, (size_t)count + 1);
                free(offsets);
            }
            if (count < 0) printf("E%d", (int)count);
            free(data);
        } else {
            fprintf(stderr, "unknown command %s\n", command);
            return 2;
        }
        putchar('\n');
    }
    free(input);
    return 0;
}
