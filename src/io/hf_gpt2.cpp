#include "src/io/hf_gpt2.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "models/gpt_params.h"
#include "src/common/errors.h"
#include "src/common/file_io.h"
#include "src/io/safetensors.h"

namespace adacc {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kConfigFile = "config.json";
constexpr const char* kWeightsFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr const char* kTokenizerConfigFile = "tokenizer_config.json";
constexpr const char* kArchitecture = "GPT2LMHeadModel";
constexpr const char* kPrefix = "transformer.";  // GPT2LMHeadModel's body; the Hub's gpt2 files omit it
constexpr const char* kHeadName = "lm_head.weight";
// The engine's layernorms divide by sqrt(var + 1e-5) (kernels/cpu/layernorm.cpp, kernels/cuda/layernorm.cu).
constexpr double kLayerNormEpsilon = 1e-5;
constexpr const char* kGpt2Fix =
    "adacc runs GPT-2 exactly as transformers' GPT2LMHeadModel computes it: pass a GPT-2 folder (e.g. "
    "openai-community/gpt2 from the Hugging Face Hub) or one `adacc export --hf-model` wrote";

std::string read_text(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw UserError("cannot read " + quoted(file) + ": check that it exists and is readable");
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

json read_json(const fs::path& file) {
    try {
        return json::parse(read_text(file));
    } catch (const json::exception& error) {
        throw UserError(quoted(file) + " is not valid JSON (" + error.what() + "): download the model folder again");
    }
}

void write_text(const fs::path& file, const std::string& text) {
    AtomicFileWriter out(file);
    out.write(text.data(), text.size());
    out.commit();
}

// ---- config.json -------------------------------------------------------------------------------

// config.json's values, with transformers' GPT2Config defaults for the keys it leaves out.
class HfConfig {
public:
    explicit HfConfig(fs::path file) : file_(std::move(file)), json_(read_json(file_)) {
        if (!json_.is_object())
            throw UserError(quoted(file_) + " is not a JSON object: download the model folder again");
    }
    json value(const char* key, const json& fallback) const {
        const auto found = json_.find(key);
        return found == json_.end() ? fallback : *found;
    }
    // UserError: KEY is VALUE, but adacc needs WANTED; the fix.
    [[noreturn]] void refuse(const char* key, const json& value, const std::string& wanted,
                             const std::string& fix = kGpt2Fix) const {
        throw UserError(quoted(file_) + ": " + key + " is " + value.dump() + ", but " + wanted + "; " + fix);
    }
    void require(const char* key, const json& fallback, const json& wanted, const std::string& why) const {
        const json& v = value(key, fallback);
        if (v != wanted) refuse(key, v, "adacc needs " + wanted.dump() + " (" + why + ")");
    }
    int positive_int(const char* key, int fallback) const {
        const json& v = value(key, fallback);
        if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > (1 << 30))
            refuse(key, v, "it must be a positive integer", "download the model folder again");
        return v.get<int>();
    }
    const fs::path& file() const { return file_; }

private:
    fs::path file_;
    json json_;
};

void check_architecture(const HfConfig& config) {
    const json& architectures = config.value("architectures", nullptr);
    if (architectures != json::array({kArchitecture}))
        config.refuse("architectures", architectures,
                      std::string("adacc reads [\"") + kArchitecture + "\"] (GPT-2 with its language-model head)");
    const json& model_type = config.value("model_type", "gpt2");
    if (model_type != "gpt2") config.refuse("model_type", model_type, "adacc reads \"gpt2\"");
}

// transformers' gelu_new and gelu_pytorch_tanh are both 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
// the engine's GELU (kernels/cpu/gelu.cpp).
void check_activation(const HfConfig& config) {
    const json& activation = config.value("activation_function", "gelu_new");
    if (activation != "gelu_new" && activation != "gelu_pytorch_tanh")
        config.refuse("activation_function", activation,
                      "adacc's GELU is GPT-2's gelu_new (the tanh approximation), and another activation gives "
                      "other outputs");
}

void check_block(const HfConfig& config, int n_embd) {
    const json& n_inner = config.value("n_inner", nullptr);
    if (!n_inner.is_null() && n_inner != 4 * n_embd)
        config.refuse("n_inner", n_inner,
                      "adacc's MLP is 4 x n_embd = " + std::to_string(4 * n_embd) + " wide (n_inner null)");
    const json& epsilon = config.value("layer_norm_epsilon", kLayerNormEpsilon);
    if (!epsilon.is_number() || std::abs(epsilon.get<double>() - kLayerNormEpsilon) > 1e-6 * kLayerNormEpsilon)
        config.refuse("layer_norm_epsilon", epsilon, "adacc's layernorms use 1e-5");
    config.require("scale_attn_weights", true, true, "attention scores are divided by sqrt(head size)");
    config.require("scale_attn_by_inverse_layer_idx", false, false, "no per-layer scaling");
    config.require("add_cross_attention", false, false, "a decoder-only GPT-2 has no cross-attention");
    config.require("tie_word_embeddings", true, true, "the output head is the token embedding");
}

// ---- the tensors -------------------------------------------------------------------------------

// One parameter tensor as GPT2LMHeadModel names it (after "transformer." and, for a layer's, "h.N.").
struct HfParam {
    const char* name;
    ParamId id;
    bool conv1d;  // a Conv1D weight: [in, out], the transpose of the engine's [out, in]
};
constexpr HfParam kEmbeddings[] = {{"wte.weight", ParamId::wte, false}, {"wpe.weight", ParamId::wpe, false}};
constexpr HfParam kLayerParams[] = {
    {"ln_1.weight", ParamId::ln1w, false},           {"ln_1.bias", ParamId::ln1b, false},
    {"attn.c_attn.weight", ParamId::qkvw, true},     {"attn.c_attn.bias", ParamId::qkvb, false},
    {"attn.c_proj.weight", ParamId::attprojw, true}, {"attn.c_proj.bias", ParamId::attprojb, false},
    {"ln_2.weight", ParamId::ln2w, false},           {"ln_2.bias", ParamId::ln2b, false},
    {"mlp.c_fc.weight", ParamId::fcw, true},         {"mlp.c_fc.bias", ParamId::fcb, false},
    {"mlp.c_proj.weight", ParamId::fcprojw, true},   {"mlp.c_proj.bias", ParamId::fcprojb, false},
};
constexpr HfParam kFinalNorm[] = {{"ln_f.weight", ParamId::lnfw, false}, {"ln_f.bias", ParamId::lnfb, false}};

struct HfTensor {
    std::string name;  // without the "transformer." prefix
    ParamId id;
    int layer;
    bool conv1d;
    std::vector<std::uint64_t> shape;  // as stored in the folder
};

HfTensor hf_tensor(const HfParam& param, int layer, const GPTConfig& config, const ParameterLayout& layout) {
    const ParamTensorInfo& info = layout.info(param.id);
    std::vector<std::uint64_t> shape(info.shape.begin() + (info.per_layer ? 1 : 0), info.shape.end());
    if (param.id == ParamId::wte) shape[0] = static_cast<std::uint64_t>(config.vocab_size);  // unpadded
    if (param.conv1d) std::reverse(shape.begin(), shape.end());
    const std::string name = info.per_layer ? "h." + std::to_string(layer) + "." + param.name : param.name;
    return {name, param.id, layer, param.conv1d, shape};
}

// Every tensor of the model, in GPT2LMHeadModel's state-dict order.
std::vector<HfTensor> hf_tensors(const GPTConfig& config) {
    const ParameterLayout layout(config);
    std::vector<HfTensor> tensors;
    for (const auto& p : kEmbeddings) tensors.push_back(hf_tensor(p, 0, config, layout));
    for (int l = 0; l < config.n_layer; ++l)
        for (const auto& p : kLayerParams) tensors.push_back(hf_tensor(p, l, config, layout));
    for (const auto& p : kFinalNorm) tensors.push_back(hf_tensor(p, 0, config, layout));
    return tensors;
}

std::size_t numel(const std::vector<std::uint64_t>& shape) {
    std::size_t n = 1;
    for (const auto d : shape) n *= d;
    return n;
}

// The folder's values of `t` (as stored) into the parameters: transposed for Conv1D weights.
void place(const HfTensor& t, const float* values, const ParameterLayout& layout, float* params) {
    float* dst = layout.at(params, t.id, t.layer);
    if (!t.conv1d) {
        std::copy(values, values + numel(t.shape), dst);
        return;
    }
    const std::size_t in = t.shape[0], out = t.shape[1];
    for (std::size_t i = 0; i < in; ++i)
        for (std::size_t o = 0; o < out; ++o) dst[o * in + i] = values[i * out + o];
}

// The reverse: `t` as the folder stores it, in `buffer` when it must be transposed.
const float* extract(const HfTensor& t, const ParameterLayout& layout, const float* params,
                     std::vector<float>& buffer) {
    const float* src = layout.at(params, t.id, t.layer);
    if (!t.conv1d) return src;  // wte's first vocab_size rows are contiguous, the padding after them
    const std::size_t in = t.shape[0], out = t.shape[1];
    buffer.resize(in * out);
    for (std::size_t i = 0; i < in; ++i)
        for (std::size_t o = 0; o < out; ++o) buffer[i * out + o] = src[o * in + i];
    return buffer.data();
}

std::string describe_config(const GPTConfig& c) {
    return "n_layer=" + std::to_string(c.n_layer) + ", n_embd=" + std::to_string(c.n_embd) +
           ", n_head=" + std::to_string(c.n_head) + ", n_positions=" + std::to_string(c.max_seq_len) +
           ", vocab_size=" + std::to_string(c.vocab_size);
}

// ---- the weight files --------------------------------------------------------------------------

struct FoundTensor {
    const SafetensorsFile* file;
    const SafetensorsTensor* tensor;
};

// model.safetensors, or the shards model.safetensors.index.json names: every tensor by name.
class HfWeights {
public:
    explicit HfWeights(const fs::path& dir) {
        if (fs::exists(dir / kWeightsFile)) {
            add_file(dir / kWeightsFile);
        } else if (fs::exists(dir / kIndexFile)) {
            open_shards(dir, dir / kIndexFile);
        } else {
            throw UserError(quoted(dir) + " has neither " + kWeightsFile + " nor " + kIndexFile +
                            ": adacc reads safetensors weights (not pytorch_model.bin); download the folder's "
                            "model.safetensors from the Hub, or save the model with save_pretrained(DIR), which "
                            "writes safetensors");
        }
    }
    const std::map<std::string, FoundTensor>& tensors() const { return tensors_; }
    const FoundTensor* find(const std::string& name) const {
        const auto found = tensors_.find(name);
        return found == tensors_.end() ? nullptr : &found->second;
    }

private:
    const SafetensorsFile& add_file(const fs::path& file) {
        files_.push_back(std::make_unique<SafetensorsFile>(file));
        for (const auto& t : files_.back()->tensors()) {
            const auto [at, added] = tensors_.emplace(t.name, FoundTensor{files_.back().get(), &t});
            if (!added)
                throw UserError("tensor '" + t.name + "' is in both " + quoted(at->second.file->path()) + " and " +
                                quoted(file) + ": the shards overlap; download the model folder again");
        }
        return *files_.back();
    }

    void open_shards(const fs::path& dir, const fs::path& index_file) {
        const json index = read_json(index_file);
        const std::string fix = "; download the model folder again";
        if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
            throw UserError(quoted(index_file) + " has no \"weight_map\" object of tensor -> shard" + fix);
        std::map<std::string, const SafetensorsFile*> shards;
        for (const auto& [name, shard] : index["weight_map"].items()) {
            const std::string file = shard.is_string() ? shard.get<std::string>() : "";
            if (file.empty() || fs::path(file).filename() != file || file == "." || file == "..")
                throw UserError(quoted(index_file) + " puts '" + name + "' in " + shard.dump() +
                                ", not the name of a file beside it" + fix);
            if (!shards.count(file)) shards[file] = &add_file(dir / file);
        }
        for (const auto& [name, shard] : index["weight_map"].items()) {
            const FoundTensor* found = find(name);
            if (!found || found->file != shards.at(shard.get<std::string>()))
                throw UserError(quoted(index_file) + " puts '" + name + "' in " + shard.dump() +
                                ", which does not hold it" + fix);
        }
        for (const auto& [name, found] : tensors_)
            if (!index["weight_map"].contains(name))
                throw UserError(quoted(found.file->path()) + " holds '" + name + "', which " + quoted(index_file) +
                                " does not list" + fix);
    }

    std::vector<std::unique_ptr<SafetensorsFile>> files_;
    std::map<std::string, FoundTensor> tensors_;
};

// Old transformers saved each layer's causal mask (attn.bias) and its fill value (attn.masked_bias)
// with the weights, as the Hub's gpt2 files still hold them: constants, not parameters.
bool is_mask_buffer(const std::string& name, const std::string& prefix, int n_layer) {
    for (int l = 0; l < n_layer; ++l) {
        const std::string layer = prefix + "h." + std::to_string(l) + ".";
        if (name == layer + "attn.bias" || name == layer + "attn.masked_bias") return true;
    }
    return false;
}

// A tensor of the model: present, of the shape config.json implies, of a dtype adacc reads.
const FoundTensor& expected_tensor(const HfWeights& weights, const HfTensor& t, const std::string& prefix,
                                   const fs::path& dir, const GPTConfig& config) {
    const std::string name = prefix + t.name;
    const FoundTensor* found = weights.find(name);
    if (!found)
        throw UserError(quoted(dir) + " has no tensor '" + name + "' " + shape_text(t.shape) +
                        ", which GPT2LMHeadModel has for config.json's " + describe_config(config) +
                        ": the weights are incomplete or of another model; download the folder again");
    if (found->tensor->shape != t.shape)
        throw UserError("tensor '" + name + "' in " + quoted(found->file->path()) + " is " +
                        shape_text(found->tensor->shape) + ", but config.json's " + describe_config(config) +
                        " makes it " + shape_text(t.shape) +
                        ": config.json and the weights disagree; use the config.json that came with the weights");
    const DType dtype = found->tensor->dtype;
    if (dtype != DType::f32 && dtype != DType::f16 && dtype != DType::bf16)
        throw UserError("tensor '" + name + "' in " + quoted(found->file->path()) + " is " +
                        std::string(safetensors_dtype_name(dtype)) +
                        "; adacc reads F32, F16 and BF16 weights: save the model in one of them");
    return *found;
}

void refuse_extra_tensors(const HfWeights& weights, const std::set<std::string>& used, const std::string& prefix,
                          const fs::path& dir, const GPTConfig& config) {
    std::vector<std::string> extra;
    for (const auto& [name, found] : weights.tensors())
        if (!used.count(name) && name != kHeadName && !is_mask_buffer(name, prefix, config.n_layer))
            extra.push_back("'" + name + "' " + shape_text(found.tensor->shape));
    if (extra.empty()) return;
    std::string listed;
    for (std::size_t i = 0; i < std::min<std::size_t>(extra.size(), 5); ++i) listed += (i ? ", " : "") + extra[i];
    if (extra.size() > 5) listed += ", ...";
    throw UserError(quoted(dir) + " holds " + std::to_string(extra.size()) +
                    " tensor(s) that GPT2LMHeadModel with config.json's " + describe_config(config) +
                    " does not have: " + listed +
                    "; the weights are of another model (or of more layers than config.json says): use the "
                    "config.json that came with them");
}

// lm_head.weight, when the folder stores it, must be the token embedding it is tied to.
void check_tied_head(const HfWeights& weights, const FoundTensor& wte, const fs::path& dir, const GPTConfig& config) {
    const FoundTensor* head = weights.find(kHeadName);
    if (!head) return;
    if (head->tensor->shape != wte.tensor->shape)
        throw UserError("tensor 'lm_head.weight' in " + quoted(head->file->path()) + " is " +
                        shape_text(head->tensor->shape) + ", but the head tied to the token embedding is " +
                        shape_text(wte.tensor->shape) + "; " + kGpt2Fix);
    std::vector<float> head_values(head->tensor->numel()), wte_values(wte.tensor->numel());
    head->file->read_f32(*head->tensor, head_values.data());
    wte.file->read_f32(*wte.tensor, wte_values.data());
    const auto [differs, in_wte] = std::mismatch(head_values.begin(), head_values.end(), wte_values.begin());
    if (differs == head_values.end()) return;
    const std::size_t at = static_cast<std::size_t>(differs - head_values.begin());
    throw UserError(quoted(dir) + "'s lm_head.weight differs from its token embedding wte (row " +
                    std::to_string(at / config.n_embd) + ", column " + std::to_string(at % config.n_embd) + ": " +
                    std::to_string(*differs) + " vs " + std::to_string(*in_wte) +
                    "): its head is not tied, and adacc's GPT-2 ties the head to wte; " + kGpt2Fix);
}

// ---- writing -----------------------------------------------------------------------------------

void write_weights(const fs::path& file, const GPTConfig& config, const float* params) {
    const ParameterLayout layout(config);
    const std::vector<HfTensor> tensors = hf_tensors(config);
    std::vector<SafetensorsSpec> specs;
    for (const auto& t : tensors) specs.push_back({kPrefix + t.name, DType::f32, t.shape});
    // transformers refuses a safetensors file whose metadata does not name its framework.
    SafetensorsWriter out(file, specs, {{"format", "pt"}});
    std::vector<float> buffer;
    for (const auto& t : tensors) out.write_next(extract(t, layout, params, buffer), numel(t.shape) * sizeof(float));
    out.commit();
}

void copy_file_atomically(const fs::path& from, const fs::path& to) { write_text(to, read_text(from)); }

// vocab.json and merges.txt are encoder.json and vocab.bpe under transformers' names, byte for
// byte; tokenizer_config.json gives GPT-2's special token and the model's context length.
void write_tokenizer(const fs::path& dir, const fs::path& vocab_dir, const Gpt2Tokenizer& tokenizer,
                     const GPTConfig& config) {
    const Gpt2VocabFiles from = Gpt2Tokenizer::vocab_files(vocab_dir), to = Gpt2VocabFiles::hugging_face(dir);
    copy_file_atomically(from.encoder, to.encoder);
    copy_file_atomically(from.merges, to.merges);
    const std::uint32_t eot = tokenizer.eot_token();
    const std::string eot_text = tokenizer.decode({&eot, 1});
    const json tokenizer_config = {{"tokenizer_class", "GPT2Tokenizer"},
                                   {"model_max_length", config.max_seq_len},
                                   {"bos_token", eot_text},
                                   {"eos_token", eot_text},
                                   {"unk_token", eot_text},
                                   {"add_prefix_space", false}};
    write_text(dir / kTokenizerConfigFile, tokenizer_config.dump(2) + "\n");
}

json config_json(const GPTConfig& config, const std::optional<Gpt2Tokenizer>& tokenizer) {
    json j = {{"architectures", {kArchitecture}},
              {"model_type", "gpt2"},
              {"activation_function", "gelu_new"},
              {"n_layer", config.n_layer},
              {"n_embd", config.n_embd},
              {"n_head", config.n_head},
              {"n_inner", nullptr},
              {"n_positions", config.max_seq_len},
              {"n_ctx", config.max_seq_len},
              {"vocab_size", config.vocab_size},
              {"layer_norm_epsilon", kLayerNormEpsilon},
              {"attn_pdrop", config.dropout},
              {"embd_pdrop", config.dropout},
              {"resid_pdrop", config.dropout},
              {"initializer_range", 0.02},
              {"scale_attn_weights", true},
              {"scale_attn_by_inverse_layer_idx", false},
              {"reorder_and_upcast_attn", false},
              {"tie_word_embeddings", true},
              {"use_cache", true},
              {"torch_dtype", "float32"}};
    if (tokenizer) j["bos_token_id"] = j["eos_token_id"] = tokenizer->eot_token();
    return j;
}

// A folder whose config.json is a GPT-2 adacc runs and whose weight files hold exactly its
// tensors, of its shapes, in dtypes adacc reads, with a tied head; no other tensor's data read yet.
struct HfFolder {
    GPTConfig config;
    HfWeights weights;
    std::vector<HfTensor> tensors;          // the model's, in state-dict order
    std::vector<const FoundTensor*> found;  // each one's place in the files

    explicit HfFolder(const fs::path& dir) : config(read_config(dir)), weights(dir), tensors(hf_tensors(config)) {
        const std::string prefix = weights.find(std::string(kPrefix) + "wte.weight") ? kPrefix : "";
        std::set<std::string> used;
        for (const auto& t : tensors) {
            found.push_back(&expected_tensor(weights, t, prefix, dir, config));
            used.insert(prefix + t.name);
        }
        refuse_extra_tensors(weights, used, prefix, dir, config);
        check_tied_head(weights, *found.front(), dir, config);  // wte comes first
    }

    static GPTConfig read_config(const fs::path& dir);
};

GPTConfig HfFolder::read_config(const fs::path& dir) {
    if (!is_hf_model_dir(dir))
        throw UserError(quoted(dir) +
                        " is not a Hugging Face model folder: it has no config.json; pass the folder "
                        "a Hub download (e.g. `huggingface-cli download openai-community/gpt2 --local-dir DIR`) or "
                        "`adacc export --hf-model DIR` wrote");
    const HfConfig hf(dir / kConfigFile);
    check_architecture(hf);
    check_activation(hf);
    GPTConfig config;
    config.n_layer = hf.positive_int("n_layer", 12);
    config.n_embd = hf.positive_int("n_embd", 768);
    config.n_head = hf.positive_int("n_head", 12);
    config.max_seq_len = hf.positive_int("n_positions", 1024);
    config.vocab_size = hf.positive_int("vocab_size", 50257);
    config.dropout = 0.0f;
    check_block(hf, config.n_embd);
    if (const auto problem = config.validate())
        throw UserError(quoted(hf.file()) + " describes a GPT-2 adacc cannot build: " + *problem);
    return config;
}

}  // namespace

bool is_hf_model_dir(const fs::path& dir) {
    std::error_code error;
    return fs::is_directory(dir, error) && fs::exists(dir / kConfigFile, error);
}

GPTConfig read_hf_gpt2(const fs::path& dir) { return HfFolder(dir).config; }

void load_hf_gpt2(const fs::path& dir, const GPTConfig& expected, float* params) {
    const HfFolder folder(dir);
    if (!same_shape(folder.config, expected))
        throw UserError(quoted(dir / kConfigFile) + " describes " + describe_config(folder.config) +
                        ", but the model has " + describe_config(expected) +
                        "; set the [model] section to the folder's shape");
    const ParameterLayout layout(expected);
    std::vector<float> values;
    for (std::size_t i = 0; i < folder.tensors.size(); ++i) {
        values.resize(numel(folder.tensors[i].shape));
        folder.found[i]->file->read_f32(*folder.found[i]->tensor, values.data());
        place(folder.tensors[i], values.data(), layout, params);
    }
    float* wte = layout.at(params, ParamId::wte);
    std::fill(wte + static_cast<std::size_t>(expected.vocab_size) * expected.n_embd,
              wte + layout.info(ParamId::wte).numel, 0.0f);
}

void save_hf_gpt2(const fs::path& dir, const GPTConfig& config, const float* params, const fs::path& vocab_dir) {
    std::optional<Gpt2Tokenizer> tokenizer;
    if (!vocab_dir.empty()) {
        tokenizer = Gpt2Tokenizer::load(vocab_dir);
        if (tokenizer->vocab_size() != static_cast<std::uint32_t>(config.vocab_size))
            throw UserError("the vocabulary in " + quoted(vocab_dir) + " has " +
                            std::to_string(tokenizer->vocab_size()) + " tokens, but the model's vocab_size is " +
                            std::to_string(config.vocab_size) +
                            ": pass the vocabulary the model was trained with, or export without --vocab");
    }
    std::error_code error;
    fs::create_directories(dir, error);
    if (error || !fs::is_directory(dir))
        throw UserError("cannot make the folder " + quoted(dir) + (error ? ": " + error.message() : ": it is a file") +
                        "; pass a folder path that can be created (or an existing folder)");
    write_weights(dir / kWeightsFile, config, params);
    if (tokenizer) write_tokenizer(dir, vocab_dir, *tokenizer, config);
    write_text(dir / kConfigFile, config_json(config, tokenizer).dump(2) + "\n");
}

}  // namespace adacc
