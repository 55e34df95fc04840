"""Independent solvers of the Chomsky-hierarchy suite (chomsky.py): each maps a task's input text to its output
text with plain Python, by a different method than the generator's (the tests compare the two on thousands of
rows). Output formats follow chomsky.py and chomsky_cs.py; "<EOS>" is the end marker of stack_manipulation and
binary_multiplication.
"""

from __future__ import annotations


def solve_even_pairs(text: str) -> str:
    """Count the 'ab' and 'ba' substrings one by one (not the first-equals-last shortcut)."""
    pairs = sum(1 for left, right in zip(text, text[1:]) if left + right in ("ab", "ba"))
    return "b" if pairs % 2 == 0 else "a"


def solve_parity_check(text: str) -> str:
    return "b" if text.count("b") % 2 == 0 else "a"


def solve_cycle_navigation(text: str) -> str:
    """Move a marker one step at a time around a 5-cycle."""
    position = 0
    for move in text:
        position = {"0": position, "1": (position + 1) % 5, "2": (position + 4) % 5}[move]
    return str(position)


def solve_modular_arithmetic_simple(text: str) -> str:
    """Fold left to right over exact Python integers and reduce modulo 5 once, at the end (the generator reduces
    after every operation)."""
    value = int(text[0])
    for op, digit in zip(text[1::2], text[2::2]):
        value = {"+": value + int(digit), "-": value - int(digit), "*": value * int(digit)}[op]
    return str(value % 5)


def solve_stack_manipulation(text: str) -> str:
    """Read the actions backwards: a pop cancels the nearest push before it, the pops left over remove the top of
    the initial stack."""
    split = _stack_prefix(text)
    stack, actions = text[:split], text[split:]
    survivors, pending_pops = [], 0
    for action in reversed(actions):
        if action == "-":
            pending_pops += 1
        elif pending_pops:
            pending_pops -= 1
        else:
            survivors.append(action.lower())
    initial_top_first = stack[::-1][pending_pops:]
    return "".join(survivors) + initial_top_first + "<EOS>"


def _stack_prefix(text: str) -> int:
    """Length of the leading run of stack symbols (a/b) before the first action."""
    for i, symbol in enumerate(text):
        if symbol not in "ab":
            return i
    return len(text)


def solve_reverse_string(text: str) -> str:
    return "".join(reversed(text))


def solve_modular_arithmetic(text: str) -> str:
    return str(_evaluate_bracketed(text) % 5)


def solve_equation(text: str) -> str:
    """Try the five values of x and keep those that make both sides equal modulo 5; the generator instead
    remembers the digit it hid. Answers every root found, so an equation with no root or two fails the test."""
    left, right = text.split("=")
    return "".join(x for x in "01234" if _evaluate_bracketed(left.replace("x", x)) % 5 == int(right))


def _evaluate_bracketed(text: str) -> int:
    """Dijkstra's two-stack evaluation of a bracketed expression, over exact integers (the generator reduces
    modulo 5 after every operation, as it writes the expression). Every operation has its own brackets, so a ')'
    completes at most one; a '-' first, after '(' or after an operator negates the digit after it."""
    values: list[int] = []
    pending: list[str] = []  # '(' and binary operators not yet applied
    negate, previous = False, ""
    for symbol in text:
        if symbol.isdigit():
            values.append(-int(symbol) if negate else int(symbol))
            negate = False
        elif symbol == "-" and previous in ("", "(", "+", "-", "*"):
            negate = True
        elif symbol == ")":
            if pending[-1] != "(":
                op, right, left = pending.pop(), values.pop(), values.pop()
                values.append(left + right if op == "+" else left - right if op == "-" else left * right)
            pending.pop()
        else:
            pending.append(symbol)
        previous = symbol
    (value,) = values
    return value

def solve_duplicate_string(text: str) -> str:
    return text * 2



def solve_missing_duplicate(text: str) -> str:
    """The letter that, put in place of '?', makes the string (padding dropped) two equal halves."""
    string = text.rstrip("_")
    half = len(string) // 2
    return "".join(c for c in "ab" if (filled := string.replace("?", c))[:half] == filled[half:])


def solve_odds_first(text: str) -> str:
    """Deal the symbols into two piles by their position counted from 1, odd pile first."""
    odd, even = [], []
    for position, symbol in enumerate(text, start=1):
        (odd if position % 2 else even).append(symbol)
    return "".join(odd + even)

def solve_binary_addition(text: str) -> str:
    """Python integers: parse both little-endian operands, add, write little-endian."""
    a, b = text.split("+")
    return format(int(a[::-1], 2) + int(b[::-1], 2), "b")[::-1]



def solve_binary_multiplication(text: str) -> str:
    """Shift and add: a doubled once per bit of b, added where b's bit is 1 (no `*` on whole numbers, which
    the generator uses); the product written out by repeated halving, least significant bit first."""
    a_text, b_text = text.split("*")
    shifted = sum(1 << i for i, bit in enumerate(a_text) if bit == "1")
    product = 0
    for bit in b_text:
        if bit == "1":
            product += shifted
        shifted <<= 1
    bits = []
    while product:
        bits.append(str(product & 1))
        product >>= 1
    return "".join(bits) + "<EOS>"


def solve_compute_sqrt(text: str) -> str:
    """Digit-by-digit square root in base 2 (two input bits per root bit, left to right; the generator uses
    math.isqrt): an odd-length input gets a leading 0 so every root bit has its pair."""
    digits = text if len(text) % 2 == 0 else "0" + text
    root = remainder = 0
    out = []
    for i in range(0, len(digits), 2):
        remainder = (remainder << 2) | int(digits[i: i + 2], 2)
        trial = (root << 2) | 1  # a next bit of 1 grows the square by (2·root + 1)² − (2·root)² = 4·root + 1
        fits = trial <= remainder
        remainder -= trial if fits else 0
        root = (root << 1) | fits
        out.append("1" if fits else "0")
    return "".join(out)

def solve_bucket_sort(text: str) -> str:
    """Counting sort over the five digits."""
    return "".join(digit * text.count(digit) for digit in "01234")


SOLVERS = {"even_pairs": solve_even_pairs, "parity_check": solve_parity_check,
           "cycle_navigation": solve_cycle_navigation, "modular_arithmetic_simple": solve_modular_arithmetic_simple,
           "stack_manipulation": solve_stack_manipulation, "reverse_string": solve_reverse_string,
           "modular_arithmetic": solve_modular_arithmetic, "solve_equation": solve_equation,
           "duplicate_string": solve_duplicate_string, "missing_duplicate": solve_missing_duplicate,
           "odds_first": solve_odds_first, "binary_addition": solve_binary_addition,
           "binary_multiplication": solve_binary_multiplication, "compute_sqrt": solve_compute_sqrt,
           "bucket_sort": solve_bucket_sort}
