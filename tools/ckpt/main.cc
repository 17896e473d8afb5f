// The `ckpt` executable: the CLI of cli.cc.

#include "ckpt/cli.h"

int main(int argc, char** argv) { return ckpt::cli_main(argc, argv); }
