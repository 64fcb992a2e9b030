package elastic

import (
	"bytes"
	"log"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// memberlistLogger sends memberlist's log lines ("[WARN] memberlist: ...")
// to zap at their level. Refusals (a wrong key, garbage on the gossip
// port, another protocol) are memberlist's [ERR] and [WARN] lines.
func memberlistLogger(z *zap.Logger) *log.Logger {
	return log.New(&mlWriter{z: z.With(zap.String("lib", "memberlist"))}, "", 0)
}

type mlWriter struct{ z *zap.Logger }

var mlLevels = []struct {
	tag   []byte
	level zapcore.Level
}{
	{[]byte("[DEBUG]"), zapcore.DebugLevel},
	{[]byte("[INFO]"), zapcore.InfoLevel},
	{[]byte("[WARN]"), zapcore.WarnLevel},
	{[]byte("[ERR]"), zapcore.ErrorLevel},
}

func (w *mlWriter) Write(p []byte) (int, error) {
	line := bytes.TrimSpace(p)
	level := zapcore.InfoLevel
	for _, l := range mlLevels {
		if bytes.HasPrefix(line, l.tag) {
			level, line = l.level, bytes.TrimSpace(line[len(l.tag):])
			break
		}
	}
	line = bytes.TrimPrefix(line, []byte("memberlist: "))
	if ce := w.z.Check(level, string(line)); ce != nil {
		ce.Write()
	}
	return len(p), nil
}
