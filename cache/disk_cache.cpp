#include "disk_cache.h"
