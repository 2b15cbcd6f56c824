"""The grammar of dates in text: the words, the anchors, one compiled alternation of forms.

Each form is a named branch of :data:`PATTERN`; ``resolving`` turns a
match of one into calendar dates.
"""

from __future__ import annotations

import re
import typing as t

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_MONTHS = (
    "january", "february", "march", "april", "may", "june",
    "july", "august", "september", "october", "november", "december",
)  # fmt: skip
MONTH_NUMBER = {name: i + 1 for i, name in enumerate(_MONTHS)}
MONTH_NUMBER.update(
    {name[:3]: i + 1 for i, name in enumerate(_MONTHS) if name != "may"} | {"sept": 9}
)
#: Month words that are also common English words in lower case ("I may", "they march").
VERBS = {"may", "march", "mar"}
SEASONS = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12}

_SMALL = (
    "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen twenty"
).split()
NUMBER_WORDS = {word: i + 1 for i, word in enumerate(_SMALL)} | {
    "a": 1, "an": 1, "a couple of": 2, "a couple": 2, "couple of": 2,
}  # fmt: skip

_ORDINAL_WORDS = (
    "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth "
    "thirteenth fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth twentieth"
).split()
ORDINALS = {word: i + 1 for i, word in enumerate(_ORDINAL_WORDS)}
ORDINALS |= {f"twenty-{word}": 20 + i + 1 for i, word in enumerate(_ORDINAL_WORDS[:9])}
ORDINALS |= {f"twenty {word}": 20 + i + 1 for i, word in enumerate(_ORDINAL_WORDS[:9])}
ORDINALS |= {"thirtieth": 30, "thirty-first": 31, "thirty first": 31}


def _words(words: t.Iterable[str]) -> str:
    """A regular expression for any of ``words`` (the longest that matches), spaces as white space.

    Written as a trie ("j(?:an(?:uary)?|u(?:ly|ne))"), so that matching costs
    the length of a word rather than the number of words.
    """
    trie: dict[str, t.Any] = {}
    for word in words:
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def pattern(node: dict[str, t.Any]) -> str:
        ends = "" in node
        options = [
            (r"\s+" if ch == " " else re.escape(ch)) + pattern(child)
            for ch, child in sorted(node.items())
            if ch
        ]
        if not options:
            return ""
        body = options[0] if len(options) == 1 else "(?:" + "|".join(options) + ")"
        return f"(?:{body})?" if ends else body

    return pattern(trie)


_WD = _words(WEEKDAYS)
_MON = rf"(?:{_words(MONTH_NUMBER)})\.?"
_MONF = _words(_MONTHS)
_NUM = rf"\d{{1,4}}|{_words(NUMBER_WORDS)}"
_ORDW = _words(ORDINALS)
_UNIT = r"day|week|month|year"
_PREP = (
    r"in|during|since|until|till|by|from|through|throughout|before|after|around|of"
    r"|(?:the\s+)?(?:beginning|start|middle|end)\s+of"
)
_DAYNUM = r"\d{1,2}(?:st|nd|rd|th)?"

# One branch per form, most specific first: at a given position the first
# branch that matches wins, and the scan takes the leftmost match.
_BRANCHES = {
    "iso": r"(?<![\w/.-])(?P<iso_y>\d{4})(?P<iso_sep>[-/])(?P<iso_m>\d{1,2})(?P=iso_sep)"
    r"(?P<iso_d>\d{1,2})(?!\d|[-/.]\d)",
    "dmy": rf"(?:(?P<dmy_wd>{_WD}),?\s+)?(?:the\s+)?"
    rf"(?:(?<![\w.:/-])(?P<dmy_d>{_DAYNUM})(?:\s+of)?|(?P<dmy_o>{_ORDW})\s+of)"
    rf"\s+(?P<dmy_m>{_MON})(?:,?\s+(?P<dmy_y>\d{{4}})|\s+(?P<dmy_r>last|this|next)\s+year)?"
    r"(?!\w|[-/.:]\d)",
    "mdy": rf"(?:(?P<mdy_wd>{_WD}),?\s+)?(?P<mdy_m>{_MON})\s+(?P<mdy_d>{_DAYNUM})"
    rf"(?:,?\s+(?P<mdy_y>\d{{4}})|\s+(?P<mdy_r>last|this|next)\s+year)?(?!\w|[-/.:,]\d)",
    "my": rf"(?:(?P<my_mod>early|mid|late)[\s-]+)?(?P<my_m>{_MON}),?\s+(?P<my_y>\d{{4}})"
    r"(?!\w|[-/.:]\d)",
    "sy": r"(?:the\s+)?(?P<sy_s>spring|summer|autumn)\s+(?:of\s+)?(?P<sy_y>\d{4})(?!\w|[-/.:]\d)"
    r"|(?P<sy_f>fall)\s+(?P<sy_fy>\d{4})(?!\w|[-/.:]\d)"
    r"|(?:the\s+)?winter\s+(?:of\s+)?(?P<sy_w1>\d{4})\s*[-/\u2013]\s*(?P<sy_w2>\d{2}|\d{4})(?!\w|[-/.:]\d)",
    "day": r"the\s+day\s+before\s+yesterday|the\s+day\s+after\s+tomorrow|yesterday|today|tonight"
    r"|tomorrow|last\s+night|this\s+(?:morning|afternoon|evening)",
    "skip": r"the\s+(?P<skip_u>week|weekend|month|year)\s+(?P<skip_d>before\s+last|after\s+next)",
    "ago": rf"(?<![\w.,])(?P<ago_n>{_NUM})\s+(?P<ago_u>{_UNIT})s?\s+(?P<ago_d>ago|from\s+now)",
    "past": rf"the\s+past\s+(?:(?P<past_n>{_NUM})\s+)?(?P<past_u>{_UNIT})s?(?!\s+of\b)"
    rf"|the\s+(?:last|previous)\s+(?P<past_m>{_NUM})\s+(?P<past_v>{_UNIT})s?(?!\s+of\b)",
    "rel": rf"(?<!the\s)(?P<rel_d>this\s+past|this\s+coming|last|this|next)\s+"
    rf"(?P<rel_w>weekend|week|month|year|{_WD}|spring|summer|autumn|fall|winter|{_MONF})"
    r"(?!\s+of\b)",
    "pm": rf"(?:(?:{_PREP})\s+)?(?P<pm_mod>early|mid|late)[\s-]+(?P<pm_m>{_MONF})(?!\s*,?\s*\d)"
    rf"|(?:{_PREP})\s+(?P<pm_n>{_MONF})(?!\s*,?\s*\d)",
    "py": rf"(?:{_PREP})\s+(?P<py_y>\d{{4}})(?!\w|[-/.:,]\d)",
    # Habits and ranges are read whole, to be left out: "on Saturday mornings",
    # "Tuesday to Saturday", "the first Wednesday of each month".
    "habit": rf"{_WD}\s+(?:mornings|afternoons|evenings|nights|lunchtimes)"
    rf"|{_WD}\s*(?:-|\u2013|to|through|till|until)\s*{_WD}"
    rf"|(?:first|second|third|fourth|last)\s+{_WD}\s+of\s+(?:each|every|the)\s+month",
    "wd": rf"(?<!every\s)(?<!each\s)(?<!good\s)(?<!black\s)(?<!last\s)(?<!next\s)(?<!this\s)"
    rf"(?P<wd_d>{_WD})(?!\s+of\b)",
}
PATTERN = re.compile(
    r"\b(?:"
    + "|".join(
        # An ISO date may run on into its time ("2023-05-07T10:00").
        rf"(?P<{name}>{body})" + ("" if name == "iso" else r"\b")
        for name, body in _BRANCHES.items()
    )
    + ")",
    re.IGNORECASE,
)

#: Where the expression starts inside a branch that may begin with a preposition.
BODY = {"pm": ("pm_mod", "pm_n"), "py": ("py_y",)}


#: Every expression holds one of these: a digit, or a word naming a day, a unit
#: of time, a weekday, a month or a season. The scan looks only near them.
ANCHOR = re.compile(
    r"\d|\b(?:"
    + _words(
        ["yesterday", "today", "tonight", "tomorrow", "night", "morning", "afternoon", "evening"]
        + ["day", "days", "week", "weeks", "weekend", "weekends", "month", "months", "year"]
        + ["years", *WEEKDAYS, *MONTH_NUMBER, *SEASONS]
    )
    + r")\b",
    re.IGNORECASE,
)
#: How far before its first anchor an expression may start: at most five
#: words ("the past a couple of days", "the beginning of early May"; "twenty-
#: first" is two), within a stretch of characters that leaves room for runs
#: of white space between them.
WORDS_BEFORE = 5
REACH = 80
WORD_START = re.compile(r"\b\w")
