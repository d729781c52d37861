/* Checks gguf/tests/fixtures/dequant/ against ggml's own C dequantizers (dequantize_row_* in
 * ggml-quants.c), bit for bit: a second reference beside gguf-py, and the only one from
 * llama.cpp's code for Q8_K, which gguf-py does not decode. It links ggml-quants.c alone, with
 * stubs for the four ggml.c functions it names but this never calls. From a checkout of
 * ggml-org/ggml at GGML (its src/ and include/ are all it needs):
 *
 *   cc -O1 -I $GGML/src -I $GGML/include scripts/reference/dequant_fixtures_ggml.c \
 *       $GGML/src/ggml-quants.c -lm -o /tmp/dequant_check
 *   /tmp/dequant_check gguf/tests/fixtures/dequant
 *
 * It prints one line per type and exits 1 where any value differs.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-quants.h"
#include "ggml.h"

void ggml_abort(const char *file, int line, const char *fmt, ...) {
    (void)fmt;
    fprintf(stderr, "ggml_abort at %s:%d\n", file, line);
    abort();
}
size_t ggml_row_size(enum ggml_type type, int64_t ne) { (void)type; (void)ne; abort(); }
const char *ggml_type_name(enum ggml_type type) { (void)type; abort(); }
size_t ggml_type_size(enum ggml_type type) { (void)type; abort(); }

typedef void (*dequantize_t)(const void *, float *, int64_t);

static const struct {
    const char *name;
    dequantize_t dequantize;
    long elems, bytes;
} TYPES[] = {
    {"q8_0", (dequantize_t)dequantize_row_q8_0, 32, 34},
    {"q4_0", (dequantize_t)dequantize_row_q4_0, 32, 18},
    {"q4_1", (dequantize_t)dequantize_row_q4_1, 32, 20},
    {"q5_0", (dequantize_t)dequantize_row_q5_0, 32, 22},
    {"q5_1", (dequantize_t)dequantize_row_q5_1, 32, 24},
    {"iq4_nl", (dequantize_t)dequantize_row_iq4_nl, 32, 18},
    {"q2_k", (dequantize_t)dequantize_row_q2_K, 256, 84},
    {"q3_k", (dequantize_t)dequantize_row_q3_K, 256, 110},
    {"q4_k", (dequantize_t)dequantize_row_q4_K, 256, 144},
    {"q5_k", (dequantize_t)dequantize_row_q5_K, 256, 176},
    {"q6_k", (dequantize_t)dequantize_row_q6_K, 256, 210},
    {"q8_k", (dequantize_t)dequantize_row_q8_K, 256, 292},
    {"iq4_xs", (dequantize_t)dequantize_row_iq4_xs, 256, 136},
};

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s FIXTURE_DIR\n", argv[0]);
        return 2;
    }
    int failed = 0;
    for (size_t t = 0; t < sizeof TYPES / sizeof TYPES[0]; t++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.bin", argv[1], TYPES[t].name);
        FILE *f = fopen(path, "rb");
        if (!f) {
            perror(path);
            return 2;
        }
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        fseek(f, 0, SEEK_SET);
        unsigned char *bytes = malloc(len);
        if (fread(bytes, 1, len, f) != (size_t)len) {
            perror(path);
            return 2;
        }
        fclose(f);
        long per_block = TYPES[t].bytes + 4 * TYPES[t].elems;
        long blocks = len / per_block, n = blocks * TYPES[t].elems;
        float *values = malloc(4 * n);
        TYPES[t].dequantize(bytes, values, n);
        const unsigned char *expected = bytes + blocks * TYPES[t].bytes;
        long differ = 0;
        for (long e = 0; e < n; e++) {
            differ += memcmp(values + e, expected + 4 * e, 4) != 0;
        }
        printf("%s: %ld blocks, %ld of %ld values differ\n", TYPES[t].name, blocks, differ, n);
        failed |= differ != 0 || len % per_block != 0;
        free(values);
        free(bytes);
    }
    return failed;
}
