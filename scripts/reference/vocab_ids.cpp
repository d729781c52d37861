// Token ids from llama.cpp for the texts of a vocab test file, in the format of llama.cpp's own
// `ggml-vocab-*.gguf.out` files: one line per text, the ids separated by spaces. Texts are cut
// from the `.inp` file at each "\n__ggml_vocab_test__\n", as test-tokenizer-0 cuts them, and
// tokenized as it tokenizes them: no BOS/EOS, special-token text left as text. Built and run by
// vocab_ids.sh.
//
//   vocab_ids VOCAB.gguf TEXTS.inp > IDS.out

#include "llama.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::vector<std::string> split_texts(const std::string & raw) {
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> texts;
    size_t at = 0;
    while (at < raw.size()) {
        const size_t next = raw.find(sep, at);
        if (next == std::string::npos) {
            texts.push_back(raw.substr(at));
            break;
        }
        texts.push_back(raw.substr(at, next - at));
        at = next + sep.size();
    }
    return texts;
}

std::vector<llama_token> tokenize(const llama_vocab * vocab, const std::string & text) {
    std::vector<llama_token> ids(text.size() + 8);
    int n = llama_tokenize(vocab, text.data(), (int32_t) text.size(), ids.data(), (int32_t) ids.size(),
                           false, false);
    if (n < 0) {
        ids.resize(-n);
        n = llama_tokenize(vocab, text.data(), (int32_t) text.size(), ids.data(), (int32_t) ids.size(),
                           false, false);
    }
    ids.resize(n < 0 ? 0 : n);
    return ids;
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s VOCAB.gguf TEXTS.inp\n", argv[0]);
        return 2;
    }
    std::ifstream inp(argv[2], std::ios::binary);
    if (!inp) {
        fprintf(stderr, "vocab_ids: cannot read %s\n", argv[2]);
        return 1;
    }
    std::stringstream raw;
    raw << inp.rdbuf();

    llama_backend_init();
    llama_model_params params = llama_model_default_params();
    params.vocab_only = true;
    llama_model * model = llama_model_load_from_file(argv[1], params);
    if (model == nullptr) {
        fprintf(stderr, "vocab_ids: llama.cpp cannot load %s\n", argv[1]);
        return 1;
    }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    for (const std::string & text : split_texts(raw.str())) {
        const std::vector<llama_token> ids = tokenize(vocab, text);
        for (const llama_token id : ids) {
            printf(" %d", id);
        }
        printf("\n");
    }
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
