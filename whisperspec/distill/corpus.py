"""Sentences to speak: plain-text corpora cut into clean, speakable sentences, in several languages.

Debian's fortunes are the main source: `fortunes` (English: quotations, proverbs, jokes, dialogue)
and `fortunes-de`, `-es`, `-it`, `-br` (Portuguese), `-ru`, `-pl`; French and Dutch have no
fortunes package, so their text comes from the translated man pages (`manpages-fr`, `-nl`; also
`-pt-br` beside `fortunes-br`): technical, but real sentences. `spoken_sentences` adds what
fortunes lack: telephone-style prompts with numbers, dates, times and names, and disfluencies
("uh", "um", repeated words). Sentences from the evaluation sets must never be used here.
"""

from __future__ import annotations

import gzip
import random
import re
import unicodedata
from pathlib import Path

FORTUNES = Path("/usr/share/games/fortunes")
MANPAGES = Path("/usr/share/man")
# fortunes-br installs its one file beside the English ones; fortunes-it links its files there too
# (symlinks, skipped): everything else at the top level is English
_NOT_ENGLISH = {"brasil"}
TEXT_SOURCES = {  # language -> (fortune files or folders, man page folder)
    "en": ((), None),
    "es": (("es",), None),
    "de": (("de",), None),
    "it": (("it",), None),
    "pt": (("brasil",), "pt_BR"),
    "ru": (("ru",), None),
    "pl": (("pl",), None),
    "fr": ((), "fr"),
    "nl": ((), "nl"),
}
_ASCII_SPEAKABLE = re.compile(r"^[A-Za-z0-9 ,.;:!?'\"()-]+$")
_SPEAKABLE = re.compile(r"^[\w ,.;:!?'\"()«»„“”‘’–-]+$")
_CYRILLIC = re.compile(r"[\u0400-\u04ff]")
_LATIN = re.compile(r"[A-Za-z]")
# translated man pages keep some paragraphs in English
_ENGLISH_WORDS = re.compile(r"\b(the|and|of|with|this|that|which|you|are|is not|will)\b")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'«„“]?[^\W\d_])")


def fortunes_texts(folder: Path = FORTUNES) -> list[str]:
    """Every English fortune of the non-offensive collections, one string each, attributions dropped."""
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} not found: install Debian's `fortunes` package or pass --corpus FILE")
    files = [p for p in sorted(folder.iterdir())
             if not p.suffix and p.is_file() and not p.is_symlink() and p.name not in _NOT_ENGLISH]
    return [text for path in files for text in _fortunes(path, "latin-1")]


def _fortunes(path: Path, encoding: str = "utf-8") -> list[str]:
    texts = []
    for entry in path.read_text(encoding=encoding, errors="replace").split("\n%\n"):
        lines = [line for line in entry.splitlines() if not line.strip().startswith("--")]
        texts.append(" ".join(lines))
    return texts


def _fortune_files(name: str) -> list[Path]:
    """A fortunes file or a folder of them (not its offensive `off/` part), .dat indexes left out."""
    path = FORTUNES / name
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in ("", ".fortunes")
                  and "off" not in p.relative_to(path).parts)


_ACCENTS = {"'": "\u0301", "`": "\u0300", "^": "\u0302", ":": "\u0308", ",": "\u0327", "~": "\u0303"}
_ROFF_ESCAPES = [(re.compile(r"\\f(\[[^\]]*\]|\(..|.)"), ""),  # font changes
                 (re.compile(r"\\\(([`'^:,~])(\w)"), lambda m: m[2] + _ACCENTS[m[1]]),  # \('e -> é
                 (re.compile(r"\\\*\(Aq|\\\(aq"), "'"), (re.compile(r"\\[-]"), "-"),
                 (re.compile(r"\\[&/,|^ ~]"), " "), (re.compile(r"\\e"), "")]


def manpage_texts(folder: Path) -> list[str]:
    """The paragraphs of every man page under `folder` (roff source, macros and escapes removed)."""
    texts = []
    for path in sorted(folder.rglob("*.gz")):
        try:
            source = gzip.decompress(path.read_bytes()).decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        paragraph: list[str] = []
        for line in source.splitlines():
            if line.startswith((".", "'")):  # a macro: paragraphs, fonts, tables end a paragraph
                texts.append(" ".join(paragraph))
                paragraph = []
                continue
            for pattern, replacement in _ROFF_ESCAPES:
                line = pattern.sub(replacement, line)
            line = unicodedata.normalize("NFC", line)
            paragraph.append("\\" if "\\" in line else line)  # an escape left: a letter lost, unspeakable
        texts.append(" ".join(paragraph))
    return [t for t in texts if t.strip()]


def language_texts(language: str) -> list[str]:
    """Every text of `language`'s sources installed here."""
    if language == "en":
        return fortunes_texts()
    if language not in TEXT_SOURCES:
        raise ValueError(f"no text sources for language {language!r} (known: {', '.join(TEXT_SOURCES)})")
    fortune_names, man_folder = TEXT_SOURCES[language]
    texts = [t for name in fortune_names for path in _fortune_files(name) for t in _fortunes(path)]
    if man_folder and (MANPAGES / man_folder).is_dir():
        texts += manpage_texts(MANPAGES / man_folder)
    return texts


def sentences(texts: list[str], min_words: int = 3, max_words: int = 40, language: str = "en") -> list[str]:
    """Plain sentences only: ascii art, code, tables and odd symbols would teach nothing useful.
    English keeps to ASCII; other languages to letters of their own script and punctuation."""
    out = []
    for text in texts:
        text = re.sub(r"\s+", " ", text).strip()
        for sentence in _SENTENCE_END.split(text):
            words = sentence.split()
            if min_words <= len(words) <= max_words and sentence[0].isalpha() and _speakable(sentence, language):
                out.append(sentence)
    return out


def _speakable(sentence: str, language: str) -> bool:
    if language == "en":
        return bool(_ASCII_SPEAKABLE.match(sentence))
    if not _SPEAKABLE.match(sentence) or "_" in sentence:
        return False
    if language == "ru":
        return not _LATIN.search(sentence)
    # other scripts and left-over option names ("-l", ALL-CAPS words) mark a sentence that is not prose
    return not (_CYRILLIC.search(sentence) or re.search(r"(^|\s)-|\b[A-Z]{3,}\b|\d\w", sentence)
                or len(_ENGLISH_WORDS.findall(sentence)) >= 2)


def load_sentences(corpus: Path | None = None, seed: int = 0, language: str = "en") -> list[str]:
    """Shuffled sentences of `corpus` (a text file, one or more sentences per line) or of the
    installed text sources of `language`."""
    texts = corpus.read_text(encoding="utf-8").splitlines() if corpus else language_texts(language)
    result = sorted(set(sentences(texts, language=language)))
    if not result:
        raise FileNotFoundError(f"no {language} sentences found: install its text sources "
                                f"(docs/DISTILL.md lists the Debian packages) or pass --corpus FILE")
    random.Random(seed).shuffle(result)
    return result


# Telephone-style prompts: numbers, dates, times, prices and names that fortunes seldom have. The
# speech engine reads the digits in its own language; the main model writes what it hears.
PROMPTS = {
    "en": ["Please enter your account number, followed by the pound key.", "You have {n} new messages.",
           "Your appointment is on {date} at {time}.", "Please call me back at {phone}.",
           "The total comes to {price} dollars.", "Hi, this is {name}, I'm calling about order number {n}.",
           "Press {d} to speak to an operator.", "Our office is open from {time} to {time2}.",
           "Flight {n} to Chicago is now boarding at gate {d}.", "We'll meet on {date}, okay?"],
    "es": ["Por favor, marque su número de cuenta seguido de la tecla numeral.", "Tiene {n} mensajes nuevos.",
           "Su cita es el {date} a las {time}.", "Por favor, llámeme al {phone}.",
           "El total es de {price} euros.", "Hola, soy {name}, llamo por el pedido número {n}.",
           "Pulse {d} para hablar con un operador.", "Nuestra oficina abre de {time} a {time2}."],
    "fr": ["Veuillez composer votre numéro de compte, suivi de la touche dièse.",
           "Vous avez {n} nouveaux messages.", "Votre rendez-vous est le {date} à {time}.",
           "Rappelez-moi au {phone}, s'il vous plaît.", "Le total est de {price} euros.",
           "Bonjour, c'est {name}, j'appelle pour la commande numéro {n}.",
           "Appuyez sur {d} pour parler à un conseiller.", "Nos bureaux sont ouverts de {time} à {time2}."],
    "de": ["Bitte geben Sie Ihre Kontonummer ein, gefolgt von der Rautetaste.", "Sie haben {n} neue Nachrichten.",
           "Ihr Termin ist am {date} um {time}.", "Bitte rufen Sie mich unter {phone} zurück.",
           "Das macht zusammen {price} Euro.", "Hallo, hier ist {name}, ich rufe wegen der Bestellung {n} an.",
           "Drücken Sie die {d}, um mit einem Mitarbeiter zu sprechen.", "Wir sind von {time} bis {time2} für Sie da."],
    "it": ["Per favore, digiti il suo numero di conto seguito dal tasto cancelletto.", "Ha {n} nuovi messaggi.",
           "Il suo appuntamento è il {date} alle {time}.", "Mi richiami al {phone}, per favore.",
           "Il totale è di {price} euro.", "Buongiorno, sono {name}, chiamo per l'ordine numero {n}.",
           "Prema {d} per parlare con un operatore.", "Il nostro ufficio è aperto dalle {time} alle {time2}."],
    "pt": ["Por favor, digite o número da sua conta seguido da tecla jogo da velha.",
           "Você tem {n} novas mensagens.", "Sua consulta é no dia {date} às {time}.",
           "Por favor, me ligue de volta no {phone}.", "O total é de {price} reais.",
           "Olá, aqui é {name}, estou ligando sobre o pedido número {n}.", "Tecle {d} para falar com um atendente."],
    "nl": ["Toets uw rekeningnummer in, gevolgd door een hekje.", "U heeft {n} nieuwe berichten.",
           "Uw afspraak is op {date} om {time}.", "Bel me alstublieft terug op {phone}.",
           "Het totaal is {price} euro.", "Hallo, met {name}, ik bel over bestelling nummer {n}.",
           "Druk op {d} om een medewerker te spreken."],
    "ru": ["Пожалуйста, введите номер вашего счёта и нажмите решётку.", "У вас {n} новых сообщений.",
           "Ваша встреча назначена на {date} в {time}.", "Перезвоните мне, пожалуйста, по номеру {phone}.",
           "Итого {price} рублей.", "Здравствуйте, это {name}, я звоню по поводу заказа номер {n}.",
           "Нажмите {d}, чтобы поговорить с оператором."],
    "pl": ["Proszę wprowadzić numer konta i nacisnąć krzyżyk.", "Masz {n} nowych wiadomości.",
           "Twoja wizyta jest {date} o {time}.", "Proszę oddzwonić pod numer {phone}.",
           "Razem {price} złotych.", "Dzień dobry, tu {name}, dzwonię w sprawie zamówienia numer {n}.",
           "Naciśnij {d}, aby połączyć się z konsultantem."],
}
NAMES = ["Anna", "Maria", "John", "Peter", "Sofia", "Lucas", "Emma", "David", "Laura", "Marco", "Elena", "Paul",
         "Julia", "Carlos", "Sarah", "Thomas", "Olga", "Ivan", "Pierre", "Giulia", "Pedro", "Jan", "Katarzyna"]
FILLERS = {"en": ["uh", "um", "you know", "like", "well", "I mean"], "es": ["eh", "este", "pues", "o sea", "bueno"],
           "fr": ["euh", "ben", "bah", "enfin", "voilà"], "de": ["äh", "ähm", "also", "na ja", "halt"],
           "it": ["ehm", "cioè", "allora", "insomma", "beh"], "pt": ["é", "hum", "tipo", "então", "né"],
           "nl": ["eh", "uhm", "nou", "dus", "zeg maar"], "ru": ["э", "ну", "как бы", "вот", "это самое"],
           "pl": ["yyy", "eee", "no", "jakby", "wiesz"]}


def telephone_prompt(language: str, rng: random.Random) -> str:
    """One prompt of `language` with random numbers, a date, times, a price and a name filled in."""
    day, month, year = rng.randint(1, 28), rng.randint(1, 12), rng.randint(1990, 2030)
    date = rng.choice([f"{day}/{month}/{year}", f"{day}.{month}.{year}", f"{year}-{month:02d}-{day:02d}"])
    hour = rng.randint(7, 18)
    fields = {"n": rng.choice([rng.randint(2, 99), rng.randint(100, 99999)]), "d": rng.randint(0, 9),
              "date": date, "time": f"{hour}:{rng.choice([0, 15, 30, 45]):02d}", "time2": f"{hour + 2}:00",
              "phone": " ".join(str(rng.randint(10, 999)) for _ in range(rng.randint(3, 4))),
              "price": rng.choice([f"{rng.randint(1, 999)}", f"{rng.randint(1, 99)}.{rng.randint(10, 99)}"]),
              "name": rng.choice(NAMES)}
    return rng.choice(PROMPTS.get(language, PROMPTS["en"])).format(**fields)


def disfluent(sentence: str, language: str, rng: random.Random) -> str:
    """The sentence as people say it: a filler or two ("uh", "euh", "äh") and a repeated word."""
    words = sentence.split()
    for _ in range(rng.randint(1, 2)):
        at = rng.randrange(len(words))
        if rng.random() < 0.6:
            words.insert(at, rng.choice(FILLERS.get(language, FILLERS["en"])) + ",")
        else:
            words.insert(at, words[at].strip(",.;:!?"))  # "I I think", "the the"
    return " ".join(words)


def spoken_sentences(sentences: list[str], language: str, rng: random.Random, count: int,
                     prompt_share: float = 0.1, disfluent_share: float = 0.15) -> list[str]:
    """`count` sentences to speak in one window: mostly `sentences`, some telephone prompts, some
    made disfluent."""
    picked = []
    for sentence in rng.sample(sentences, min(count, len(sentences))):
        roll = rng.random()
        if roll < prompt_share:
            sentence = telephone_prompt(language, rng)
        elif roll < prompt_share + disfluent_share:
            sentence = disfluent(sentence, language, rng)
        picked.append(sentence)
    return picked
