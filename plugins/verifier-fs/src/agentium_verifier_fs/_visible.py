r"""How text from a test record shows in evidence: every character that does not draw as itself escaped.

A test's name is text whoever wrote the test chose, and it reaches the model and the operator in
the verdict's evidence. :func:`visible` writes it so that it stands for one string and draws as
what it is: what a viewer would not draw, would draw as something else, or would take for
another letter is written as its code point (``\u200b``, ``\u0435``), the way Python's ``repr``
writes it, a backslash is doubled, and the quote that delimits it is escaped (``\"``).
"""

from __future__ import annotations

import unicodedata
from typing import Final

__all__ = ["CUT", "visible"]

#: Characters Python counts as printable that still draw nothing (Unicode's default-ignorable
#: code points outside the format, control and unassigned categories): the combining grapheme
#: joiner, the Hangul fillers, the Khmer inherent vowels, the Mongolian free variation selectors
#: and the variation selectors (U+FE00-U+FE0F, U+E0100-U+E01EF). Each lets two names that draw
#: alike differ, or carries text a reader does not see.
_INVISIBLE: Final = frozenset(
    [
        *(0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180B, 0x180C, 0x180D, 0x180F, 0x3164, 0xFFA0),
        *range(0xFE00, 0xFE10),
        *range(0xE0100, 0xE01F0),
    ]
)

#: What ends a text that was cut; a text's own U+2026 is escaped, so this shows only a cut.
CUT: Final = "\u2026"

#: The mixes of scripts a text's letters may make and still show as themselves: Unicode's
#: "highly restrictive" level (UTS #39, section 5.2), the mixes Japanese, Chinese and Korean
#: writing make with Latin. Any one script alone is allowed too. Other mixes (Latin with Cyrillic
#: or Greek) are how a look-alike of a Latin name is made: ``tеst_ok`` with a Cyrillic ``е``.
_ALLOWED_MIXES: Final = (
    frozenset({"LATIN", "HAN", "HIRAGANA", "KATAKANA"}),
    frozenset({"LATIN", "HAN", "BOPOMOFO"}),
    frozenset({"LATIN", "HAN", "HANGUL"}),
)

#: A character's script, from the first word of its Unicode name where that word is not the
#: script's name (the standard library has no Script property; the name gives it for letters).
_SCRIPT_OF_WORD: Final = {
    "CJK": "HAN",
    "IDEOGRAPHIC": "HAN",
    "KATAKANA-HIRAGANA": "KATAKANA",
    "ARABIC-INDIC": "ARABIC",
    "EXTENDED": "ARABIC",  # EXTENDED ARABIC-INDIC DIGIT ...
}


def _code_point(code: int) -> str:
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _script(char: str) -> str | None:
    """The script of a letter or digit (``LATIN``, ``CYRILLIC``, ``HAN``...); ``None`` for anything else.

    ASCII digits, punctuation and marks belong to no script (Unicode's Common and Inherited): they
    are written alike in every script, so they make no mix.
    """
    if char.isascii():
        return "LATIN" if char.isalpha() else None
    category = unicodedata.category(char)
    if not (category.startswith("L") or category == "Nd"):
        return None
    word = unicodedata.name(char, "?").split(" ", 1)[0]
    return _SCRIPT_OF_WORD.get(word, word)


def _mixed(text: str) -> bool:
    """Whether the letters and digits of ``text`` mix scripts beyond :data:`_ALLOWED_MIXES`."""
    scripts = {s for s in map(_script, text) if s is not None}
    return len(scripts) > 1 and not any(scripts <= allowed for allowed in _ALLOWED_MIXES)


def _escaped(char: str, quote: str, mixed: bool) -> str:
    """``char`` as it shows: itself, or its code point written as Python writes it (see :func:`visible`)."""
    code = ord(char)
    if char == "\\" or char == quote:
        return "\\" + char  # so an escape or a quote in the text is never taken for one written here
    if char.isascii():
        return char if char.isprintable() else _code_point(code)
    if not char.isprintable() or code in _INVISIBLE or char == CUT:
        return _code_point(code)
    category = unicodedata.category(char)
    if (
        category[0] in "PSZ"  # punctuation, symbols, separators
        or category in ("Nl", "No")  # numbers that are not decimal digits: Ⅻ, ½
        or unicodedata.normalize("NFKC", char) != char  # a compatibility form: fullwidth, 𝐭, ﬁ, ²
        or unicodedata.name(char, "").startswith("MODIFIER LETTER")  # ʺ draws like a quote
        or (mixed and category[0] in "LN")  # a letter or digit of a look-alike mix
    ):
        return _code_point(code)
    return char


def _spells_another(run: str, char: str) -> bool:
    """Whether ``char``, after ``run`` (what shows as itself since the last escape), draws unlike itself.

    It does when ``run`` followed by it is not in Unicode's composed form
    (NFC): it composes with what precedes it (``e`` + U+0301 draws as ``é``,
    U+1100 + U+1161 as U+AC00), is one of two marks out of their canonical
    order, or is itself another spelling of a character (the Angstrom sign
    U+212B of ``Å``) — so two names that are the same text for Unicode
    cannot show alike. A combining mark with nothing of the name before it
    (first, or after an escape) would draw on the text around it.
    """
    if not run and (unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Mc", "Me")):
        return True
    return not unicodedata.is_normalized("NFC", run + char)


def visible(text: str, limit: int, quote: str = '"') -> str:
    r"""``text`` as evidence shows it: what does not draw as itself escaped, at most ``limit`` long.

    Escaped (``\x85``, ``\u200b``, ``\U000e0041``), like Python's ``repr``:

    - every character ``str.isprintable`` refuses — controls (C0, DEL, C1),
      format characters (Cf: the bidirectional-text controls, the zero-width
      space, joiners and no-break space U+FEFF, the word joiner and invisible
      operators U+2060-U+2064, the soft hyphen, the tag characters
      U+E0001-U+E007F), the line and paragraph separators, every space but
      U+0020, private-use and unassigned code points — and the printable
      invisibles of :data:`_INVISIBLE`;
    - a character that would draw as something else where it stands (see
      :func:`_spells_another`: it composes with the one before it, as ``e`` +
      U+0301 draws ``é``, or is a combining mark with nothing of the text to
      draw on);
    - look-alikes: outside ASCII, every punctuation mark, symbol and number
      that is not a decimal digit (``″`` draws like the closing quote, ``∶``
      like a colon), every compatibility form (NFKC changes it: fullwidth
      ``ｔ``, mathematical ``𝐭``, the ligature ``ﬁ``, superscripts), every
      modifier letter (``ʺ``), and, in a text whose letters mix scripts other
      than Unicode's "highly restrictive" mixes (one script; Latin with Han
      and Japanese kana, Bopomofo or Hangul), every letter and digit outside
      ASCII: ``tеst_ok`` with a Cyrillic ``е`` shows as ``t\u0435st_ok``.
      Text in one script (``тест_вход``, ``café``, ``テスト``) shows as itself;

    and a backslash and ``quote`` (the character the caller delimits the
    text with; ``"`` by default) get a backslash before them. So the shown
    text names one string, read back by undoing those escapes: two names that
    are the same text for Unicode (canonically equivalent) show differently,
    text hidden in one shows, none breaks a line, makes a viewer reorder what
    follows, or ends its quotes early. Look-alikes within one script (Latin
    ``ɑ`` for ``a``) and a text written wholly in another script (Cyrillic
    ``сосо``) still show as themselves: Unicode's confusables data would be
    needed to tell them, and names are only shown, never compared.

    Text longer than ``limit`` is cut, never inside an escape, and ends with
    ``…``; a ``…`` of the text's own is escaped (``\u2026``), so a whole text
    never shows as a cut one. Only the first ``limit`` characters are looked
    at, as no more can show.
    """
    mixed = _mixed(text[:limit])
    pieces: list[str] = []
    length = 0
    run = ""  # what shows as itself since the last escape (at most ``limit`` characters)
    for char in text:
        piece = _escaped(char, quote, mixed)
        if piece == char and _spells_another(run, char):
            piece = _code_point(ord(char))
        run = run + char if piece == char else ""
        if length + len(piece) > limit:
            kept: list[str] = []
            room = limit - 1
            for shown in pieces:
                if len(shown) > room:
                    break
                kept.append(shown)
                room -= len(shown)
            return "".join(kept) + CUT
        pieces.append(piece)
        length += len(piece)
    return "".join(pieces)
