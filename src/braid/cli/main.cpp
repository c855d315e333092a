#include <cstdio>
int main() { std::puts("braid " BRAID_VERSION); return 0; }
