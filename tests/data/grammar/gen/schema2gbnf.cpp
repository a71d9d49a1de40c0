// Converts a JSON schema (file argument) to GBNF with upstream's json_schema_to_grammar (the
// converter llama-server uses), printing the grammar. Reference tool; see README.md here.
#include "json-schema-to-grammar.h"
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

int main(int argc, char ** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s SCHEMA.json\n", argv[0]);
        return 2;
    }
    std::ifstream f(argv[1]);
    std::stringstream ss;
    ss << f.rdbuf();
    std::cout << json_schema_to_grammar(common_json::parse(ss.str()));
    return 0;
}
