package cpu

import "testing"

// TestEmbeddingBadIds: an id outside the table panics before anything is
// read or written, naming the position and the id (a GPU backend could not
// check cheaply; the CPU one does, because a wrong id would otherwise read
// another row silently or crash far from the cause).
func TestEmbeddingBadIds(t *testing.T) {
	be := New(2)
	table, y := make(Buf, 3*4), make(Buf, 2*4)
	mustPanicWith(t, "Embedding: ids[1] = 3 outside the table's 3 rows", func() { be.Embedding(y, table, Ids{0, 3}) })
	mustPanicWith(t, "EmbeddingBackward: ids[0] = -1 outside the table's 3 rows", func() { be.EmbeddingBackward(table, y, Ids{-1, 0}) })
	mustPanicWith(t, "Embedding: table has 12 values, not a multiple of 5 columns", func() { be.Embedding(make(Buf, 10), table, Ids{0, 1}) })
}

func TestEmbeddingBackwardRepeats(t *testing.T) {
	dt := Buf{1, 1, 2, 2}
	New(1).EmbeddingBackward(dt, Buf{10, 20, 30, 40, 50, 60}, Ids{1, 1, 0})
	if want := (Buf{51, 61, 42, 62}); dt[0] != want[0] || dt[1] != want[1] || dt[2] != want[2] || dt[3] != want[3] {
		t.Errorf("dtable = %v, want %v", dt, want)
	}
}

func TestEmbeddingNoAllocs(t *testing.T) {
	be := New(4)
	table, y, ids := make(Buf, 50*16), make(Buf, 30*16), make(Ids, 30)
	mustNotAlloc(t, "Embedding", func() { be.Embedding(y, table, ids) })
	mustNotAlloc(t, "EmbeddingBackward", func() { be.EmbeddingBackward(table, y, ids) })
}
