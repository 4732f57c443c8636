#include <cstdio>
int main() { std::puts("fptrain " FPTRAIN_VERSION); return 0; }
