// Reference for the trigger-pattern matcher: for each pattern / input pair of regex_cases.txt
// (pattern line, then input lines until a blank line; inputs use \n escapes), where the
// constrained text would start, with std::regex (ECMAScript) as upstream's lazy grammars use
// it: a pattern "^...$" is first matched against the whole input, then searched; the start is
// the first capturing group that matched something, else the match. Prints "-" for no match.
#include <fstream>
#include <iostream>
#include <regex>
#include <string>

static std::string unescape(const std::string & s) {
    std::string out;
    for (size_t i = 0; i < s.size(); i++) {
        if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] == 'n') { out += '\n'; i++; }
        else { out += s[i]; }
    }
    return out;
}

static long start_of(const std::smatch & m) {
    for (size_t i = 1; i < m.size(); i++) {
        if (m.length(i) > 0) {
            return (long) m.position(i);
        }
    }
    return (long) m.position(0);
}

int main(int argc, char ** argv) {
    std::ifstream f(argv[1]);
    std::string line, pattern;
    std::regex re;
    bool have = false;
    while (std::getline(f, line)) {
        if (line.empty()) { have = false; continue; }
        if (!have) {
            pattern = line;
            re = std::regex(pattern);
            have = true;
            std::cout << "pattern " << pattern << "\n";
            continue;
        }
        std::string input = unescape(line);
        long start = -1;
        std::smatch m;
        if (!pattern.empty() && pattern.front() == '^' && pattern.back() == '$' && std::regex_match(input, m, re)) {
            start = start_of(m);
        } else if (std::regex_search(input, m, re)) {
            start = start_of(m);
        }
        std::cout << (start < 0 ? std::string("-") : std::to_string(start)) << "\n";
    }
}
