#include "key.h"
