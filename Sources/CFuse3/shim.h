#ifndef CFUSE3_SHIM_H
#define CFUSE3_SHIM_H
// 312, not 35: at 3.5 fuse_session_loop_mt is a macro Swift cannot see.
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#endif
