// KVTOOL_API marks what the shared libkvtool exports (the runtime pool's C++ API and what it
// returns); everything else is compiled with hidden visibility.
#pragma once
#if defined(_WIN32)
#define KVTOOL_API
#else
#define KVTOOL_API __attribute__((visibility("default")))
#endif
