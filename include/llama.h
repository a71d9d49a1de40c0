/* llama.h for deepseek: the llama.cpp b11312 API, implemented by libdeepseek. */
#include "deepseek.h"
