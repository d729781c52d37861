// Reference token ids from llama.cpp for trine's tokenizer and greedy-decoding tests.
//
// Reads a cases file (format in cases.txt) and prints one JSON document on stdout: the ids
// llama_tokenize gives for each tokenize case, and for each greedy case the prompt ids, the
// argmax token of every step and the two largest logits of that step. Built and run by run.sh.

#include "llama.h"

#include <cstdint>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

struct Case {
    bool greedy = false;
    bool add_special = false;
    bool parse_special = false;
    int n_predict = 0;
    std::string text;
};

struct Options {
    std::string model;
    std::string cases;
    int threads = 2;
    int check_threads = 1;
    int n_ctx = 512;
    bool flash_attn = true;
    ggml_type kv_type = GGML_TYPE_F16;
    std::vector<std::pair<std::string, std::string>> info;
};

struct Generation {
    std::vector<llama_token> ids;
    std::vector<llama_token> runner_up;
    std::vector<std::pair<float, float>> top2;
    std::vector<std::vector<float>> logits;
    bool stopped_at_eog = false;
};

[[noreturn]] void fail(const std::string & msg) { throw std::runtime_error(msg); }

std::string unescape(const std::string & s, int line) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '\\') {
            out += s[i];
            continue;
        }
        if (++i == s.size()) {
            fail("cases line " + std::to_string(line) + ": text ends in a lone backslash");
        }
        switch (s[i]) {
            case 'n': out += '\n'; break;
            case 't': out += '\t'; break;
            case 'r': out += '\r'; break;
            case 's': out += ' '; break;
            case '\\': out += '\\'; break;
            default:
                fail("cases line " + std::to_string(line) + ": unknown escape \\" + s[i]);
        }
    }
    return out;
}

bool parse_flag(const std::string & word, int line) {
    if (word == "0" || word == "1") {
        return word == "1";
    }
    fail("cases line " + std::to_string(line) + ": expected 0 or 1, got '" + word + "'");
}

// Splits off `n` space-separated words; what follows the n-th space is the text, verbatim.
std::vector<std::string> split_words(const std::string & s, size_t n, std::string & rest, int line) {
    std::vector<std::string> words;
    size_t pos = 0;
    while (words.size() < n) {
        size_t sp = s.find(' ', pos);
        if (sp == std::string::npos) {
            fail("cases line " + std::to_string(line) + ": expected " + std::to_string(n) +
                 " fields before the text");
        }
        words.push_back(s.substr(pos, sp - pos));
        pos = sp + 1;
    }
    rest = s.substr(pos);
    return words;
}

std::vector<Case> read_cases(const std::string & path) {
    std::ifstream in(path);
    if (!in) {
        fail("cannot open cases file " + path);
    }
    std::vector<Case> cases;
    std::string line;
    for (int no = 1; std::getline(in, line); ++no) {
        if (line.empty() || line[0] == '#') {
            continue;
        }
        std::string rest;
        Case c;
        const std::string kind = line.substr(0, line.find(' '));
        if (kind == "tokenize") {
            auto w = split_words(line, 3, rest, no);
            c.add_special = parse_flag(w[1], no);
            c.parse_special = parse_flag(w[2], no);
        } else if (kind == "greedy") {
            auto w = split_words(line, 3, rest, no);
            c.greedy = true;
            c.add_special = true;
            c.parse_special = parse_flag(w[1], no);
            char * end = nullptr;
            long n = std::strtol(w[2].c_str(), &end, 10);
            if (*end != '\0' || n < 1 || n > 4096) {
                fail("cases line " + std::to_string(no) + ": n_predict '" + w[2] + "' is not in 1..4096");
            }
            c.n_predict = static_cast<int>(n);
        } else {
            fail("cases line " + std::to_string(no) + ": unknown kind '" + kind + "'");
        }
        c.text = unescape(rest, no);
        cases.push_back(std::move(c));
    }
    return cases;
}

std::string json_str(const std::string & s) {
    std::string out = "\"";
    for (unsigned char ch : s) {
        switch (ch) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\t': out += "\\t"; break;
            case '\r': out += "\\r"; break;
            default:
                if (ch < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", ch);
                    out += buf;
                } else {
                    out += static_cast<char>(ch);
                }
        }
    }
    return out + "\"";
}

// %.9g round-trips every f32, so a reader can recompute margins exactly.
std::string json_float(float f) {
    if (!std::isfinite(f)) {
        fail("non-finite logit " + std::to_string(f));
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", f);
    return buf;
}

template <typename T> std::string json_ints(const std::vector<T> & v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) {
        out += (i ? "," : "") + std::to_string(v[i]);
    }
    return out + "]";
}

std::vector<llama_token> tokenize(const llama_vocab * vocab, const std::string & text, bool add_special,
                                  bool parse_special) {
    if (text.size() > INT32_MAX / 2) {
        fail("text of " + std::to_string(text.size()) + " bytes is too long to tokenize");
    }
    const int32_t len = static_cast<int32_t>(text.size());
    std::vector<llama_token> ids(text.size() + 2);
    int32_t n = llama_tokenize(vocab, text.data(), len, ids.data(), (int32_t) ids.size(), add_special, parse_special);
    if (n < 0 && n != INT32_MIN) {
        ids.resize(static_cast<size_t>(-n));
        n = llama_tokenize(vocab, text.data(), len, ids.data(), (int32_t) ids.size(), add_special, parse_special);
    }
    if (n < 0) {
        fail("llama_tokenize failed (" + std::to_string(n) + ") on " + json_str(text));
    }
    ids.resize(static_cast<size_t>(n));
    return ids;
}

std::string piece(const llama_vocab * vocab, llama_token id) {
    char buf[256];
    int32_t n = llama_token_to_piece(vocab, id, buf, sizeof buf, 0, true);
    if (n < 0) {
        fail("token " + std::to_string(id) + " has a piece longer than " + std::to_string(sizeof buf) + " bytes");
    }
    return std::string(buf, static_cast<size_t>(n));
}

std::vector<llama_token> eog_ids(const llama_vocab * vocab) {
    std::vector<llama_token> ids;
    for (llama_token t = 0; t < llama_vocab_n_tokens(vocab); ++t) {
        if (llama_vocab_is_eog(vocab, t)) {
            ids.push_back(t);
        }
    }
    return ids;
}

// A fresh context per prompt, so no state from an earlier prompt can leak into the next.
Generation generate(llama_model * model, const Options & opt, int threads, const std::vector<llama_token> & prompt,
                    int n_predict, bool keep_logits) {
    if (prompt.empty()) {
        fail("a greedy prompt tokenized to no tokens");
    }
    if (prompt.size() + static_cast<size_t>(n_predict) > static_cast<size_t>(opt.n_ctx)) {
        fail("prompt of " + std::to_string(prompt.size()) + " tokens plus " + std::to_string(n_predict) +
             " steps exceeds the context of " + std::to_string(opt.n_ctx));
    }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = static_cast<uint32_t>(opt.n_ctx);
    cp.n_batch = static_cast<uint32_t>(opt.n_ctx);
    cp.n_ubatch = static_cast<uint32_t>(opt.n_ctx);
    cp.n_seq_max = 1;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    cp.flash_attn_type = opt.flash_attn ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = opt.kv_type;
    cp.type_v = opt.kv_type;
    cp.no_perf = true;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fail("llama_init_from_model failed");
    }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int32_t n_vocab = llama_vocab_n_tokens(vocab);
    Generation g;
    std::vector<llama_token> batch_tokens(prompt);
    llama_batch batch = llama_batch_get_one(batch_tokens.data(), (int32_t) batch_tokens.size());
    for (int step = 0; step < n_predict; ++step) {
        if (int32_t rc = llama_decode(ctx, batch); rc != 0) {
            llama_free(ctx);
            fail("llama_decode returned " + std::to_string(rc) + " at step " + std::to_string(step));
        }
        const float * logits = llama_get_logits_ith(ctx, -1);
        if (!logits) {
            llama_free(ctx);
            fail("llama.cpp returned no logits at step " + std::to_string(step));
        }
        // Strict comparisons: on an exact tie the lower id wins, as in a plain argmax.
        llama_token best = 0, second = -1;
        for (llama_token t = 1; t < n_vocab; ++t) {
            if (logits[t] > logits[best]) {
                second = best;
                best = t;
            } else if (second < 0 || logits[t] > logits[second]) {
                second = t;
            }
        }
        g.ids.push_back(best);
        g.runner_up.push_back(second);
        g.top2.emplace_back(logits[best], logits[second]);
        if (keep_logits) {
            g.logits.emplace_back(logits, logits + n_vocab);
        }
        if (llama_vocab_is_eog(vocab, best)) {
            g.stopped_at_eog = true;
            break;
        }
        batch_tokens.assign(1, best);
        batch = llama_batch_get_one(batch_tokens.data(), 1);
    }
    llama_free(ctx);
    return g;
}

// Compares logits step by step while both runs chose the same tokens (after a divergence the
// inputs differ and a comparison says nothing).
std::string thread_check_json(const Generation & a, const Generation & b, int ta, int tb) {
    size_t steps = 0;
    float max_diff = 0.0f;
    for (; steps < a.logits.size() && steps < b.logits.size(); ++steps) {
        for (size_t t = 0; t < a.logits[steps].size(); ++t) {
            max_diff = std::fmax(max_diff, std::fabs(a.logits[steps][t] - b.logits[steps][t]));
        }
        if (a.ids[steps] != b.ids[steps]) {
            ++steps;
            break;
        }
    }
    return "{\"prompt_index\": 0, \"threads\": [" + std::to_string(ta) + ", " + std::to_string(tb) +
           "], \"ids_equal\": " + (a.ids == b.ids ? "true" : "false") +
           ", \"steps_compared\": " + std::to_string(steps) +
           ", \"max_abs_logit_diff\": " + json_float(max_diff) + "}";
}

Options parse_args(int argc, char ** argv) {
    Options o;
    auto need = [&](int i, int k) {
        if (i + k >= argc) {
            fail(std::string("option ") + argv[i] + " needs " + std::to_string(k) + " value(s)");
        }
    };
    auto to_int = [](const std::string & name, const char * s, int lo, int hi) {
        char * end = nullptr;
        long v = std::strtol(s, &end, 10);
        if (*end != '\0' || v < lo || v > hi) {
            fail(name + " '" + s + "' is not in " + std::to_string(lo) + ".." + std::to_string(hi));
        }
        return static_cast<int>(v);
    };
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--model") { need(i, 1); o.model = argv[++i]; }
        else if (a == "--cases") { need(i, 1); o.cases = argv[++i]; }
        else if (a == "--threads") { need(i, 1); o.threads = to_int(a, argv[++i], 1, 256); }
        else if (a == "--check-threads") { need(i, 1); o.check_threads = to_int(a, argv[++i], 1, 256); }
        else if (a == "--n-ctx") { need(i, 1); o.n_ctx = to_int(a, argv[++i], 512, 1 << 20); }
        else if (a == "--flash-attn") {
            need(i, 1);
            const std::string v = argv[++i];
            if (v != "on" && v != "off") { fail("--flash-attn takes on or off, not '" + v + "'"); }
            o.flash_attn = v == "on";
        } else if (a == "--kv-type") {
            need(i, 1);
            const std::string v = argv[++i];
            if (v != "f16" && v != "f32") { fail("--kv-type takes f16 or f32, not '" + v + "'"); }
            o.kv_type = v == "f16" ? GGML_TYPE_F16 : GGML_TYPE_F32;
        } else if (a == "--info") { need(i, 2); o.info.emplace_back(argv[i + 1], argv[i + 2]); i += 2; }
        else { fail("unknown argument '" + a + "'"); }
    }
    if (o.model.empty() || o.cases.empty()) {
        fail("usage: llama_reference --model GGUF --cases FILE [--threads N] [--check-threads N] [--n-ctx N] "
             "[--flash-attn on|off] [--kv-type f16|f32] [--info KEY VALUE]...");
    }
    return o;
}

void quiet_log(ggml_log_level level, const char * text, void *) {
    if (level >= GGML_LOG_LEVEL_WARN) {
        std::fputs(text, stderr);
    }
}

void run(const Options & opt) {
    const std::vector<Case> cases = read_cases(opt.cases);
    llama_log_set(quiet_log, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.progress_callback = [](float, void *) { return true; };
    llama_model * model = llama_model_load_from_file(opt.model.c_str(), mp);
    if (!model) {
        fail("cannot load model " + opt.model);
    }
    const llama_vocab * vocab = llama_model_get_vocab(model);

    std::string out = "{\n\"provenance\": {";
    for (size_t i = 0; i < opt.info.size(); ++i) {
        out += (i ? ", " : "") + json_str(opt.info[i].first) + ": " + json_str(opt.info[i].second);
    }
    out += "},\n\"settings\": {\"threads\": " + std::to_string(opt.threads) +
           ", \"n_ctx\": " + std::to_string(opt.n_ctx) + ", \"n_seq_max\": 1, \"flash_attn\": " +
           (opt.flash_attn ? "true" : "false") + ", \"kv_type\": " + json_str(ggml_type_name(opt.kv_type)) +
           ", \"add_bos\": " + (llama_vocab_get_add_bos(vocab) ? "true" : "false") +
           ", \"eog_ids\": " + json_ints(eog_ids(vocab)) +
           ", \"system_info\": " + json_str(llama_print_system_info()) + "},\n";

    std::string tok_json, greedy_json, check_json = "null";
    for (const Case & c : cases) {
        const std::vector<llama_token> ids = tokenize(vocab, c.text, c.add_special, c.parse_special);
        if (!c.greedy) {
            tok_json += std::string(tok_json.empty() ? "" : ",\n") + "{\"text\": " + json_str(c.text) +
                        ", \"add_special\": " + (c.add_special ? "true" : "false") +
                        ", \"parse_special\": " + (c.parse_special ? "true" : "false") + ", \"ids\": " +
                        json_ints(ids) + "}";
            continue;
        }
        const bool first = greedy_json.empty();
        const Generation g = generate(model, opt, opt.threads, ids, c.n_predict, first);
        if (first) {
            const Generation h = generate(model, opt, opt.check_threads, ids, c.n_predict, true);
            check_json = thread_check_json(g, h, opt.threads, opt.check_threads);
        }
        std::string text, top2 = "[";
        for (size_t i = 0; i < g.ids.size(); ++i) {
            text += piece(vocab, g.ids[i]);
            top2 += std::string(i ? "," : "") + "[" + json_float(g.top2[i].first) + "," +
                    json_float(g.top2[i].second) + "]";
        }
        greedy_json += std::string(first ? "" : ",\n") + "{\"prompt\": " + json_str(c.text) +
                       ",\n \"parse_special\": " + (c.parse_special ? "true" : "false") +
                       ",\n \"prompt_ids\": " + json_ints(ids) + ",\n \"n_predict\": " + std::to_string(c.n_predict) +
                       ",\n \"ids\": " + json_ints(g.ids) + ",\n \"runner_up\": " + json_ints(g.runner_up) +
                       ",\n \"top2\": " + top2 + "]" + ",\n \"stopped_at_eog\": " +
                       (g.stopped_at_eog ? "true" : "false") + ",\n \"completion\": " + json_str(text) + "}";
    }
    out += "\"thread_check\": " + check_json + ",\n\"tokenize\": [\n" + tok_json + "\n],\n\"greedy\": [\n" +
           greedy_json + "\n]\n}\n";
    llama_model_free(model);
    llama_backend_free();
    std::fputs(out.c_str(), stdout);
}

}  // namespace

int main(int argc, char ** argv) {
    try {
        run(parse_args(argc, argv));
    } catch (const std::exception & e) {
        std::fprintf(stderr, "llama_reference: %s\n", e.what());
        return 1;
    }
    return 0;
}
