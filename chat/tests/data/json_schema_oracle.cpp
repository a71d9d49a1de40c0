// json_schema_oracle: llama.cpp b11312's own json_schema_to_grammar (see json_schema_oracle.py).
// Reads JSON schemas, one per line, from stdin; prints for each "OK\n<grammar>\x01\n" or "ERR\n<message>\n\x01\n".
#include "json-schema-to-grammar.h"
#include "json.h"
#include <iostream>
#include <string>
int main() {
    std::string line;
    while (std::getline(std::cin, line)) {
        try {
            auto g = json_schema_to_grammar(common_json::parse(line), true);
            std::cout << "OK\n" << g << "\x01\n";
        } catch (const std::exception & e) {
            std::cout << "ERR\n" << e.what() << "\n\x01\n";
        }
        std::cout.flush();
    }
}
