// pretok_split: llama.cpp b11312's pre-tokenizer splits (its exported unicode_regex_split, as
// llm_tokenizer_bpe calls it, without the GPT-2 byte encoding so that the words are the text's own
// bytes), for the differential test tokenizer::pretok::differential. Built and run by
// pretok_fuzz.py, which extracts the regex sets from upstream's src/llama-vocab.cpp.
//
//   pretok_split SETS FUZZ > fuzz.out
//
// SETS: per set "NAME\nCOUNT\n" then COUNT regexes as "LEN\nBYTES\n"; FUZZ: texts as "LEN\nBYTES\n".
// Prints, per text and per set in SETS' order, one line "NAME len len ..." (each word's length in
// bytes).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

std::vector<std::string> unicode_regex_split(const std::string & text, const std::vector<std::string> & regex_exprs, bool byte_encode);

static bool read_blob(std::istream & in, std::string & out) {
    std::string line;
    if (!std::getline(in, line)) return false;
    size_t n = std::stoul(line);
    out.resize(n);
    in.read(&out[0], (std::streamsize) n);
    in.get(); // the separating newline
    return true;
}

int main(int argc, char ** argv) {
    if (argc != 3) { fprintf(stderr, "usage: pretok_split SETS FUZZ\n"); return 2; }
    std::ifstream sets_in(argv[1], std::ios::binary), fuzz(argv[2], std::ios::binary);
    std::vector<std::pair<std::string, std::vector<std::string>>> sets;
    std::string name, count;
    while (std::getline(sets_in, name) && std::getline(sets_in, count)) {
        std::vector<std::string> exprs((size_t) std::stoul(count));
        for (auto & e : exprs) read_blob(sets_in, e);
        sets.emplace_back(name, exprs);
    }
    std::string text;
    while (read_blob(fuzz, text)) {
        for (const auto & s : sets) {
            std::cout << s.first;
            for (const auto & w : unicode_regex_split(text, s.second, false)) std::cout << ' ' << w.size();
            std::cout << '\n';
        }
    }
    return 0;
}
