package data

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
	"unicode/utf8"
)

// gpt2Cases are GPT-2's ids for these strings, as its reference encoder
// gives them (OpenAI's encoder.py, through the npm port gpt-3-encoder
// 1.1.4, an implementation independent of the one troupe uses; tiktoken's
// r50k_base gives the same ids). They cover spaces, digits, contractions,
// unicode, newlines and the text of <|endoftext|>, which ordinary encoding
// does not turn into the special token.
var gpt2Cases = []struct {
	text string
	ids  []int32
}{
	{"Hello world", []int32{15496, 995}},
	{"Hello, world!", []int32{15496, 11, 995, 0}},
	{" leading space", []int32{3756, 2272}},
	{"trailing space ", []int32{9535, 4386, 2272, 220}},
	{"multiple   spaces", []int32{48101, 220, 220, 9029}},
	{"digits 1234567890 and 3.14159", []int32{12894, 896, 17031, 2231, 30924, 3829, 290, 513, 13, 1415, 19707}},
	{"it's we're they've I'm you'll he'd", []int32{270, 338, 356, 821, 484, 1053, 314, 1101, 345, 1183, 339, 1549}},
	{"don't DON'T", []int32{9099, 470, 23917, 6, 51}},
	{"unicode: héllo wörld, 日本語, emoji 🎉👍", []int32{46903, 1098, 25, 289, 2634, 18798, 266, 30570, 335, 11, 10545, 245, 98, 17312, 105, 45739, 252, 11, 44805, 12520, 236, 231, 41840, 235}},
	{"line1\nline2\n\n\nline3", []int32{1370, 16, 198, 1370, 17, 628, 198, 1370, 18}},
	{"\ttab\tseparated", []int32{197, 8658, 197, 25512, 515}},
	{"func main() {\n\tfmt.Println(\"hi\")\n}\n", []int32{20786, 1388, 3419, 1391, 198, 197, 69, 16762, 13, 18557, 18755, 7203, 5303, 4943, 198, 92, 198}},
	{"<|endoftext|>", []int32{27, 91, 437, 1659, 5239, 91, 29}},
	{"   ", []int32{220, 220, 220}},
	{"a", []int32{64}},
	{"The Go Programming Language Specification", []int32{464, 1514, 30297, 15417, 18291, 2649}},
}

func TestGPT2Ids(t *testing.T) {
	tk, err := GPT2()
	if err != nil {
		t.Fatal(err)
	}
	if tk.Name() != "gpt2" || tk.VocabSize() != 50257 || tk.EOT() != 50256 {
		t.Fatalf("gpt2: name %q, vocabulary %d, EOT %d", tk.Name(), tk.VocabSize(), tk.EOT())
	}
	for _, c := range gpt2Cases {
		got, err := tk.Encode(nil, []byte(c.text))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, c.ids) {
			t.Errorf("Encode(%q) = %v, want %v", c.text, got, c.ids)
		}
		if back := tk.Decode(got); back != c.text {
			t.Errorf("Decode(Encode(%q)) = %q", c.text, back)
		}
	}
	if got := tk.Decode([]int32{15496, 50256, 995, -1, 50257}); got != "Hello<|endoftext|> world\uFFFD\uFFFD" {
		t.Errorf("Decode with EOT and ids outside the vocabulary = %q", got)
	}
	if again, _ := TokenizerFor("gpt2"); again != tk {
		t.Error("TokenizerFor(gpt2) builds a second tokenizer")
	}
}

// Bytes that are not UTF-8 become their single-byte tokens, between the
// valid runs encoded as usual, and everything round-trips.
func TestGPT2InvalidUTF8(t *testing.T) {
	tk, _ := GPT2()
	text := []byte("Hello\xff world\xe2\x82")
	ids, err := tk.Encode(nil, text)
	if err != nil {
		t.Fatal(err)
	}
	g := tk.(*gpt2Tokenizer)
	want := []int32{15496, g.byteID[0xff], 995, g.byteID[0xe2], g.byteID[0x82]}
	if !slices.Equal(ids, want) {
		t.Errorf("Encode = %v, want %v", ids, want)
	}
	if back := tk.Decode(ids); back != string(text) {
		t.Errorf("round trip %q", back)
	}
}

// Random byte strings (mostly UTF-8 of many scripts, some raw bytes) round
// trip through every tokenizer that takes them.
func TestTokenizerRoundTrip(t *testing.T) {
	gpt2, _ := GPT2()
	byteT, _ := TokenizerFor("byte")
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []rune("aé日🎉 \n\t'0.,Zß\u200b\uFFFD")
	for i := range 300 {
		var b []byte
		for range r.IntN(64) {
			if r.IntN(10) == 0 {
				b = append(b, byte(r.IntN(256)))
			} else {
				b = utf8.AppendRune(b, alphabet[r.IntN(len(alphabet))])
			}
		}
		for _, tk := range []Tokenizer{gpt2, byteT} {
			ids, err := tk.Encode(nil, b)
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range ids {
				if id < 0 || id >= int32(tk.VocabSize()) || id == tk.EOT() {
					t.Fatalf("%s: id %d of %q outside the ordinary ids", tk.Name(), id, b)
				}
			}
			if back := tk.Decode(ids); back != string(b) {
				t.Fatalf("case %d %s: %q round-trips to %q", i, tk.Name(), b, back)
			}
		}
	}
}

func TestCharAndByteTokenizers(t *testing.T) {
	ch, err := CharTokenizer("abc\n")
	if err != nil {
		t.Fatal(err)
	}
	if ch.VocabSize() != 5 || ch.EOT() != 4 || ch.Name() != "char" {
		t.Fatalf("char: vocabulary %d, EOT %d", ch.VocabSize(), ch.EOT())
	}
	ids, err := ch.Encode([]int32{9}, []byte("cab\n"))
	if err != nil || !slices.Equal(ids, []int32{9, 2, 0, 1, 3}) {
		t.Fatalf("char Encode = %v, %v", ids, err)
	}
	if got := ch.Decode([]int32{4, 0, 7}); got != "<|endoftext|>a\uFFFD" {
		t.Errorf("char Decode = %q", got)
	}
	if _, err := ch.Encode(nil, []byte("abz")); err == nil {
		t.Error("char: a character outside the vocabulary encoded")
	}
	if _, err := ch.Encode(nil, []byte("a\xff")); err == nil {
		t.Error("char: invalid UTF-8 encoded")
	}
	bt, _ := TokenizerFor("byte")
	if bt.VocabSize() != 257 || bt.EOT() != 256 {
		t.Fatalf("byte: vocabulary %d, EOT %d", bt.VocabSize(), bt.EOT())
	}
	if got := bt.Decode([]int32{256, 'x', 300}); got != "<|endoftext|>x\uFFFD" {
		t.Errorf("byte Decode = %q", got)
	}
	if _, err := TokenizerFor("char"); err == nil {
		t.Error("TokenizerFor(char) without a character list")
	}
	if _, err := TokenizerFor("bpe"); err == nil || !bytes.Contains([]byte(err.Error()), []byte("gpt2, char, byte")) {
		t.Errorf("TokenizerFor(bpe): %v", err)
	}
}

// DEL is encoded by troupe, not tiktoken-go (validPrefix): its id must be
// the same as tiktoken's, which holds when no token has DEL with other
// bytes, so that no merge could take it.
func TestGPT2Delete(t *testing.T) {
	tk, _ := GPT2()
	g := tk.(*gpt2Tokenizer)
	for id, p := range g.pieces {
		if len(p) > 1 && bytes.IndexByte(p, 0x7f) >= 0 {
			t.Errorf("token %d %q holds DEL", id, p)
		}
	}
	ids, _ := tk.Encode(nil, []byte("a\x7fb !\x7f!"))
	if want := []int32{64, 221, 65, 5145, 221, 0}; !slices.Equal(ids, want) {
		t.Errorf("Encode = %v, want %v", ids, want)
	}
}
