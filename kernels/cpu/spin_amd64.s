//go:build amd64 && !noasm

#include "textflag.h"

// func spinPause()
TEXT ·spinPause(SB), NOSPLIT, $0-0
	PAUSE
	RET
