// The `ckpt` executable: the CLI of cli.cc.

#include "commands.h"

int main(int argc, char** argv) { return ckpt::tool::cli_main(argc, argv); }
