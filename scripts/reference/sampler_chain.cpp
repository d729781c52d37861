// llama.cpp's sampler chain, in its common sampler's default order (penalties, top-k, top-p,
// min-p, temperature), applied to small logit vectors: the tokens left for the final draw and
// their probabilities, which trine's sampler must reproduce
// (llama/tests/fixtures/sampler_llama_cpp.json, checked by llama/src/sampler.rs's tests).
//
//   g++ -std=c++17 -O1 scripts/reference/sampler_chain.cpp -I $LCPP/include -I $LCPP/ggml/include \
//       -L $BUILD/bin -lllama -Wl,-rpath,$BUILD/bin -o /tmp/sampler_chain
//   /tmp/sampler_chain > llama/tests/fixtures/sampler_llama_cpp.json
//
// with LCPP the llama.cpp sources of scripts/reference/lcpp.sh and BUILD its build folder.

#include "llama.h"

#include <cmath>
#include <cstdio>
#include <vector>

struct Case {
    const char * name;
    std::vector<int> history;
    int top_k;
    float top_p, min_p, temp;
    int last_n;
    float repeat, freq, present;
};

int main() {
    const int n = 16;
    std::vector<float> logits(n);
    for (int i = 0; i < n; i++) {
        logits[i] = std::sin(i * 1.7f) * 3.0f + i * 0.05f;
    }
    const std::vector<int> history = {3, 12, 3, 11, 3, 5, 0};
    const Case cases[] = {
        {"llama_cpp_defaults", {}, 40, 0.95f, 0.05f, 0.8f, 64, 1.0f, 0.0f, 0.0f},
        {"top_k", {}, 5, 1.0f, 0.0f, 1.0f, 64, 1.0f, 0.0f, 0.0f},
        {"top_p", {}, 0, 0.7f, 0.0f, 1.3f, 64, 1.0f, 0.0f, 0.0f},
        {"min_p", {}, 0, 1.0f, 0.2f, 0.5f, 64, 1.0f, 0.0f, 0.0f},
        {"penalties_in_a_window_of_4", history, 8, 0.9f, 0.05f, 0.9f, 4, 1.3f, 0.4f, 0.6f},
        {"penalties_in_a_window_of_64", history, 40, 0.95f, 0.05f, 1.0f, 64, 1.5f, 0.1f, 0.2f},
        {"greedy_after_penalties", history, 40, 0.95f, 0.05f, 0.0f, 64, 2.0f, 0.0f, 0.0f},
    };
    std::printf("{\n \"note\": \"written by scripts/reference/sampler_chain.cpp against llama.cpp's libllama; do not edit\",\n");
    std::printf(" \"logits\": [");
    for (int i = 0; i < n; i++) {
        std::printf("%s%.9g", i ? ", " : "", logits[i]);
    }
    std::printf("],\n \"cases\": [\n");
    bool first = true;
    for (const Case & c : cases) {
        llama_sampler * chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
        llama_sampler_chain_add(chain, llama_sampler_init_penalties(n, c.last_n, c.repeat, c.freq, c.present));
        llama_sampler_chain_add(chain, llama_sampler_init_top_k(c.top_k));
        llama_sampler_chain_add(chain, llama_sampler_init_top_p(c.top_p, 0));
        llama_sampler_chain_add(chain, llama_sampler_init_min_p(c.min_p, 0));
        llama_sampler_chain_add(chain, llama_sampler_init_temp_ext(c.temp, 0.0f, 1.0f));
        for (int id : c.history) {
            llama_sampler_accept(chain, id);
        }
        std::vector<llama_token_data> data(n);
        for (int i = 0; i < n; i++) {
            data[i] = {i, logits[i], 0.0f};
        }
        llama_token_data_array arr = {data.data(), (size_t) n, -1, false};
        llama_sampler_apply(chain, &arr);
        // What the draw chooses from: the softmax of the logits left (temperature 0 leaves
        // the largest alone finite).
        double max = -INFINITY;
        for (size_t i = 0; i < arr.size; i++) {
            max = std::fmax(max, arr.data[i].logit);
        }
        double sum = 0.0;
        for (size_t i = 0; i < arr.size; i++) {
            sum += std::exp(arr.data[i].logit - max);
        }
        std::printf("%s  {\"name\": \"%s\", \"history\": [", first ? "" : ",\n", c.name);
        first = false;
        for (size_t i = 0; i < c.history.size(); i++) {
            std::printf("%s%d", i ? ", " : "", c.history[i]);
        }
        std::printf("], \"top_k\": %d, \"top_p\": %.9g, \"min_p\": %.9g, \"temp\": %.9g, \"last_n\": %d, "
                    "\"repeat\": %.9g, \"frequency\": %.9g, \"presence\": %.9g, \"kept\": [",
                    c.top_k, c.top_p, c.min_p, c.temp, c.last_n, c.repeat, c.freq, c.present);
        bool first_kept = true;
        for (size_t i = 0; i < arr.size; i++) {
            if (std::isinf(arr.data[i].logit)) {
                continue;
            }
            std::printf("%s[%d, %.12g]", first_kept ? "" : ", ", arr.data[i].id,
                        std::exp(arr.data[i].logit - max) / sum);
            first_kept = false;
        }
        std::printf("]}");
        llama_sampler_free(chain);
    }
    std::printf("\n ]\n}\n");
    return 0;
}
