/*
 * Content-defined chunking: FastCDC (Xia et al., USENIX ATC 2016) with a gear
 * rolling hash, cut-point skipping below min_size and normalized chunking
 * level 2 (a mask of b+2 bits before avg_size, b-2 bits after it). The exact
 * rule is in threadloom.h; the Python spec is threadloom.core.cdc.
 */
#include "threadloom.h"
#include "tl_internal.h"

/*
 * GEAR[i] = the (i+1)-th output of splitmix64 seeded with 0x7468726561646c6f
 * (the ASCII bytes "threadlo"):
 *     state += 0x9e3779b97f4a7c15
 *     z = state; z = (z ^ z >> 30) * 0xbf58476d1ce4e5b9
 *     z = (z ^ z >> 27) * 0x94d049bb133111eb; output z ^ z >> 31
 * threadloom.core.cdc builds the same table from the same seed, and a test
 * compares the two. Changing it changes every cut point.
 */
static const uint64_t tl_gear[256] = {
    0x783ac4d9df3d8dc6ull, 0x92ed6b90fd34507cull, 0xf9a049db2b98f5edull,
    0x342563cbf2e63569ull, 0x702db9344ae8f2f1ull, 0x0dcbecf79d5e1162ull,
    0x4408ba73ddaa3b65ull, 0x484fdc61b761aa4cull, 0x8fc1cfe55e481565ull,
    0x6b72fd0941860796ull, 0x7e36701e2b6d3a84ull, 0xc9c633acbc060cb7ull,
    0x6e5e0e114a9c0d31ull, 0xeead461b03db9edbull, 0xf7ae586bb803c844ull,
    0x3f80d8590d9fe47dull, 0xb3872cd5b0bddc30ull, 0x4183915e100066d4ull,
    0xc6e08fd010ac0505ull, 0xb4dcd7ed2659fac7ull, 0x7605c75437a5c23full,
    0x6b972e400a3206b3ull, 0x934b4a43dfbf1fd7ull, 0xff70c6d8a8424917ull,
    0x02e7b2f82712f578ull, 0xc41589547384b7a0ull, 0xed35d48cf0f0f10bull,
    0x074d0e7c1c0456b8ull, 0x13a1a6bbd755357bull, 0xa933605c98680ed7ull,
    0xc631905056329badull, 0xb84ddfafa385f96cull, 0xf298c2d4ec005211ull,
    0xa9cbe5b1cbfba2f5ull, 0x6bfb2ba6f5886b4eull, 0x2130247374f2debbull,
    0x4d43d308bff39afcull, 0x4288d31c165e3831ull, 0x164507ff7dcff8b6ull,
    0x4d506cdfd42de207ull, 0x602af6832b493cb9ull, 0xeccd12ba707e30b6ull,
    0x3c8e8ac2e3b8a22aull, 0x7ef528324ccec2cfull, 0xe4b6395dec81c138ull,
    0x96b0deb25a43a286ull, 0x77aa37536f748503ull, 0xc15e8749a92f7f73ull,
    0x42a0ade73ee764bdull, 0x79692a32571ed5daull, 0xeea27806518eee30ull,
    0x35640bc834523039ull, 0xeddabebf87b99b3aull, 0xb89c147112a7de5dull,
    0xadd62fce98f66911ull, 0x64b984c5732aecb7ull, 0xa324ac7c559c7538ull,
    0x7eb42002a26af84aull, 0x29e4606fb1030aa5ull, 0x05561e9c9747e50bull,
    0x57fdec5078fc6134ull, 0x786ed11ea9133ab1ull, 0xc4aa4d986332d051ull,
    0x72a0c7ffbc34071eull, 0x73270f5f8605e077ull, 0x0331dd1660f05eb5ull,
    0x9e8810f7a847253eull, 0xba408dd0de6bdaecull, 0x177b69528a2d60a1ull,
    0xe04908837e101f3full, 0xd0fb89f9d2ccdfaaull, 0xa586a0710ea661e3ull,
    0x9e66251b3dc94152ull, 0x58a98e460cef297dull, 0x77dc4c6d50eeada1ull,
    0xe2fbf7fbed0079aeull, 0xa5221485e166c1feull, 0x5daa4e60685eb660ull,
    0x2760c92ca556ffb1ull, 0xb939fa24a930f711ull, 0x8a6270876938bab3ull,
    0x6885f12a4082376full, 0x9a408dd2031e7603ull, 0xbaea868806e495deull,
    0x0d528bdc8f928899ull, 0xaf286fb539b9566eull, 0x4cc7416b5375b120ull,
    0x9c7fed52af25d94full, 0x8d7e15f4a6d9939eull, 0x1b7b178ad22f4598ull,
    0x4c304aa7aa138ad5ull, 0x542ccfd083bc8c70ull, 0xcef26ac08ea01af7ull,
    0xe290774a043cde8full, 0xdf67db2f8043a814ull, 0xb5b76f9d32279d82ull,
    0x850cc37251712e58ull, 0x80e2a0196402b147ull, 0x1a3fae4169b8f11dull,
    0x4dc31b024e9fb201ull, 0x9e2918314bd5f037ull, 0xc3d4b4aa0f24738bull,
    0x71e52907dd7187beull, 0x4098be519830de3eull, 0x684ee51617d32d20ull,
    0x97ae8771e5219acfull, 0x2e7df847fabcff15ull, 0x6edc8856da1c9700ull,
    0x7ecb2281885bc563ull, 0xc3812e74b9edd53dull, 0x4f54ae24552837d5ull,
    0x17edb2f9adc43d3aull, 0xa67f6de572487786ull, 0x41a280ea0a4a8a33ull,
    0x578f5703e31b0685ull, 0xab186ec065e5cf80ull, 0xb6ace1937e4b9483ull,
    0x893709e2bdff889aull, 0x30a8a79fc4bbc7baull, 0x194b05bcc23b98c1ull,
    0xcf8c2fef44c809f2ull, 0x4cac31abcdfad93cull, 0x4a936e41f633ad0bull,
    0x22248548d85162eaull, 0x1c77290922f903a0ull, 0x74815b2287c959d6ull,
    0x36b28108794e2d0aull, 0xc5ada97bec222ac0ull, 0x9812c90d62fa459bull,
    0x41c9f8936549b6b5ull, 0x0a3d9e12cd78db58ull, 0x89e436195e37908aull,
    0xbf3cda12e76a4d4dull, 0xefd185a979b1cc1bull, 0x9dc135d497794ea8ull,
    0x908e03c31f3b0a46ull, 0x7f2de2c22e4a99e4ull, 0x3789fe241d9c3824ull,
    0x4cd1670110e521ccull, 0xcdaa72daefbcb1c7ull, 0xe154bd8d77fbc61full,
    0xba722f4be4f62d21ull, 0x9f6ad78e6c3f25c4ull, 0x82f9d8ab116b4090ull,
    0xe964561f983dc276ull, 0xb56269efe9a56df1ull, 0x4a40e0e7c37c2b28ull,
    0x8cb43c93550c1b39ull, 0xfdd910cd23552503ull, 0xa5270fe7695219a3ull,
    0xc7dfdf0d59883fb5ull, 0x86fd1d0d53d01993ull, 0x9ec567f619cfcbf0ull,
    0x66ec7ea956058296ull, 0x574f9ca756ed3c13ull, 0x3aec20cb1f9cec5dull,
    0xee7ada390a7c5fcfull, 0xac0c8b098c209e32ull, 0x5cff66c55c3ce9a9ull,
    0xebfb6f1668eff396ull, 0x6e2d7de9e07373c5ull, 0x16c8db8fba80eb85ull,
    0x2d29216195c2f0caull, 0x5c6548d5b10127caull, 0xacaf25aca6acdf2cull,
    0x90ed572a656f43ebull, 0x5e503041af49152bull, 0xc18b6a79cd74ab27ull,
    0xdfb30fc09c5bb385ull, 0x934e0435ff48bc71ull, 0x48f1e8c21bba30ebull,
    0x619ce01d829e4842ull, 0x904a33dda20c86f4ull, 0xf8377032107b92c2ull,
    0x59c18ab216226e2full, 0x62c352086babdd65ull, 0x2eaaa39e05af4a75ull,
    0xeb470eb54de393bbull, 0x23c7249b8eba3fa6ull, 0x04f4cb27b2356dedull,
    0x8779357f06cf7b3aull, 0xbf97ec4f02bb0e7aull, 0xee93a321bf8a7ebbull,
    0xb90b6843d1eceab4ull, 0xc84c8f171cef1892ull, 0x08f746244d1050bbull,
    0x57c6ce22130128e0ull, 0x4d1943457b9a5a95ull, 0x912a14678e49c8e7ull,
    0x9d28bd5e35392f9full, 0x57bea8e8b3a72eadull, 0x559fca89041dfe23ull,
    0xbe0ed7c2095ca90cull, 0x3ff9348d9a97b54aull, 0xd5ef8f955ece6169ull,
    0x4a53ecf7d5764025ull, 0x192cc4e927d17362ull, 0x907a214aaf93903aull,
    0x5a002561a1bb4f8aull, 0xc17c0f4e1f582523ull, 0x6c8a76ce2821a1f0ull,
    0xee55b15eddbf20f8ull, 0x5460eea2d889b653ull, 0x4941cced5a5afaa7ull,
    0x676905f58d23ac60ull, 0x43296b88dbcce563ull, 0xe96ca445af83340bull,
    0xf6675b8ebf901071ull, 0xd81f17a006360bebull, 0xb28ae5ab4ea86d3eull,
    0xc6849dafd15522d0ull, 0xb98a31bb96d0fb2bull, 0xe6e02026f9380b32ull,
    0xf50ad5cab40b1889ull, 0xd7249b8d64d3d832ull, 0x0a2b7077a7e825b2ull,
    0xc0c196db64f100d0ull, 0x7db28a9c35f68cf0ull, 0x2414b7ebc7bf8f1bull,
    0x7bffeeb5a976529aull, 0xc54a8d5ecf9e7f41ull, 0xa00ab123eb62fd9dull,
    0xf86503388948f009ull, 0xa732ea092eae2d5eull, 0xfd4d358e81a9877aull,
    0xb47da0b79b834234ull, 0x64ff29623a7e2714ull, 0xaeef1e9a9e15afa7ull,
    0xe83252fad41cc118ull, 0x140dfae09483e438ull, 0x939b9b002e82344cull,
    0xd26abe10709e1699ull, 0xe7d43d1a2da0437aull, 0x6a8bab64060c4cc1ull,
    0x2d0999ad72963498ull, 0x1d126ca57046b005ull, 0xf0523155baf8d85cull,
    0x75c270326afb8dc4ull, 0x1ded88a8ba88ac57ull, 0xb42e65d2979a7ef2ull,
    0x6c58e3b5cd98732eull, 0x4c920c26e7e7962eull, 0x897be53c68495807ull,
    0xaa2420b96689845aull, 0xb5b7cfc532a25deaull, 0xc8c437dc5d602343ull,
    0x855516186fa59ad1ull, 0x79a14f62e26f62e4ull, 0x36d744a969758073ull,
    0x0f40fa9685945329ull, 0x71f2b881aa4aa3d6ull, 0xfa68f517d44e797cull,
    0x511302a25f5176b1ull, 0xccbc61f1ca09470cull, 0xd77951145ba2e91bull,
    0xeb1964e301ef6f46ull,
};

/* The top `bits` bits of a 64-bit word (1 <= bits <= 63). */
static uint64_t tl_top_mask(unsigned bits)
{
    return ~(uint64_t)0 << (64 - bits);
}

static unsigned tl_floor_log2(uint64_t v)
{
    unsigned bits = 0;
    while (v >>= 1) {
        bits++;
    }
    return bits;
}

/*
 * Hash data[i .. stop) into *fp; return the offset just past the first byte after
 * which (*fp & mask) == 0, or 0 when there is none. Two bytes per step: fp two bytes
 * on is 4*fp + (2*g1 + g2), so the loop-carried chain is one shift-add per two bytes,
 * while the middle value is still checked.
 */
static size_t tl_cdc_scan(const unsigned char *data, size_t i, size_t stop, uint64_t *fp,
                          uint64_t mask)
{
    uint64_t h = *fp;
    for (; i + 2 <= stop; i += 2) {
        uint64_t g1 = tl_gear[data[i]], g2 = tl_gear[data[i + 1]];
        uint64_t h1 = (h << 1) + g1;
        h = (h << 2) + ((g1 << 1) + g2);
        if (!(h1 & mask)) {
            return i + 1;
        }
        if (!(h & mask)) {
            return i + 2;
        }
    }
    if (i < stop) {
        h = (h << 1) + tl_gear[data[i]];
        if (!(h & mask)) {
            return i + 1;
        }
    }
    *fp = h;
    return 0;
}

/* Length of the chunk starting at data (remaining > min_size bytes left). */
static size_t tl_cdc_next(const unsigned char *data, size_t remaining, size_t min_size,
                          size_t avg_size, size_t max_size, uint64_t mask_s, uint64_t mask_l)
{
    size_t end = remaining < max_size ? remaining : max_size;
    size_t normal = remaining < avg_size ? remaining : avg_size;
    uint64_t fp = 0;
    size_t cut = tl_cdc_scan(data, min_size, normal, &fp, mask_s);
    if (cut == 0) {
        cut = tl_cdc_scan(data, normal, end, &fp, mask_l);
    }
    return cut ? cut : end;
}

int64_t tl_cdc_cuts(const unsigned char *data, size_t len, size_t min_size, size_t avg_size,
                    size_t max_size, uint64_t *cuts, size_t cap)
{
    uint64_t mask_s, mask_l;
    unsigned bits;
    size_t start = 0, count = 0;

    if (min_size < 1 || min_size > avg_size || avg_size > max_size || avg_size < 8 ||
        (uint64_t)avg_size > ((uint64_t)1 << 32) || (data == NULL && len > 0) ||
        (cuts == NULL && cap > 0) || len > (size_t)INT64_MAX) {
        return TL_EINVAL;
    }
    bits = tl_floor_log2(avg_size);
    mask_s = tl_top_mask(bits + 2);
    mask_l = tl_top_mask(bits - 2);

    while (start < len) {
        size_t remaining = len - start;
        size_t size = remaining;
        if (remaining > min_size) {
            size = tl_cdc_next(data + start, remaining, min_size, avg_size, max_size, mask_s,
                               mask_l);
        }
        if (count == cap) {
            return TL_ENOSPC;
        }
        start += size;
        cuts[count++] = (uint64_t)start;
    }
    return (int64_t)count;
}
