// Prints, for every text of a fuzz file and every pre-tokenizer regex list (sets.inc), the byte
// lengths of the words llama.cpp's unicode_regex_split produces. See pretok_fuzz.py.
#include "unicode.h"
#include <string>
#include <vector>
#include <fstream>
#include <cstdio>
#include <utility>
int main(int argc, char**argv){
  std::vector<std::pair<std::string, std::vector<std::string>>> sets = {
#include "sets.inc"
  };
  std::ifstream f(argv[1], std::ios::binary); size_t len;
  FILE* out = fopen(argv[2], "w");
  while (f >> len) { f.get(); std::string s(len, '\0'); f.read(&s[0], len); f.get();
    for (auto &st : sets) {
      auto words = unicode_regex_split(s, st.second, false);
      fprintf(out, "%s", st.first.c_str());
      for (auto &w : words) fprintf(out, " %zu", w.size());
      fprintf(out, "\n");
    }
  }
  fclose(out);
}
