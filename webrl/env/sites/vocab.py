"""Word lists the seeded site data is drawn from.

Kept apart from the generator so that `data.py` reads as the recipe (which records exist and how
they relate) while this file is only the raw material. Every list is ordered and fixed: the data,
and therefore every shipped task's reference answer, depends on these exact lists and the seed.
Names are built so that they are unique per site (a search for a name finds exactly one record).
"""

from __future__ import annotations

COLOURS = ["Red", "Blue", "Green", "Black", "White", "Silver", "Walnut", "Bamboo", "Copper", "Slate", "Ivory", "Amber"]

# category name -> (SKU prefix, product nouns); one product name = colour + noun.
CATEGORIES = {
    "Kitchen": ("KIT", ["Mug", "Kettle", "Skillet", "Teapot", "Blender", "Colander", "Spatula", "Cutting Board"]),
    "Electronics": ("ELE", ["Headphones", "Speaker", "Charger", "Keyboard", "Mouse", "Webcam", "Router", "Power Bank"]),
    "Garden": ("GAR", ["Planter", "Hose", "Shovel", "Rake", "Bird Feeder", "Watering Can", "Lantern", "Bench"]),
    "Toys": ("TOY", ["Puzzle", "Robot", "Kite", "Yo-Yo", "Teddy Bear", "Race Car", "Board Game", "Building Set"]),
    "Sports": ("SPO", ["Yoga Mat", "Dumbbell", "Water Bottle", "Jump Rope", "Tennis Racket", "Backpack", "Helmet"]),
    "Beauty": ("BEA", ["Hair Brush", "Mirror", "Soap Dish", "Towel", "Comb", "Makeup Bag", "Nail Kit", "Lotion"]),
    "Office": ("OFF", ["Notebook", "Desk Lamp", "Stapler", "Pen Set", "Binder", "Desk Organizer", "Whiteboard"]),
    "Pets": ("PET", ["Dog Bed", "Cat Tree", "Leash", "Pet Bowl", "Chew Toy", "Collar", "Litter Box", "Pet Carrier"]),
}

FIRST_NAMES = [
    "Emma",
    "Liam",
    "Olivia",
    "Noah",
    "Ava",
    "Ethan",
    "Sophia",
    "Mason",
    "Mia",
    "Lucas",
    "Amelia",
    "Logan",
    "Harper",
    "James",
    "Ella",
    "Aiden",
    "Grace",
    "Henry",
    "Chloe",
    "Owen",
    "Nora",
    "Caleb",
    "Lily",
    "Ryan",
]
LAST_NAMES = [
    "Lopez",
    "Smith",
    "Chen",
    "Patel",
    "Garcia",
    "Kim",
    "Brown",
    "Nguyen",
    "Miller",
    "Davis",
    "Wilson",
    "Moore",
    "Taylor",
    "Clark",
    "Lewis",
    "Walker",
    "Hall",
    "Young",
    "King",
    "Wright",
    "Scott",
    "Green",
    "Baker",
    "Adams",
]
CITIES = ["Pittsburgh", "Cleveland", "Columbus", "Buffalo", "Erie", "Akron", "Toledo", "Dayton"]
ORDER_STATUSES = ["Complete", "Complete", "Complete", "Processing", "Pending", "Canceled"]
REVIEW_TEXTS = [
    "Works great.",
    "Good value for the money.",
    "Broke after a week.",
    "Exactly as described.",
    "Would buy again.",
    "Smaller than expected.",
    "Nice colour.",
    "Arrived late but fine.",
    "Not worth it.",
    "My kids love it.",
    "Solid build quality.",
    "Too expensive for what it is.",
]

FORUMS = {
    "books": ["mystery novels", "fantasy series", "audiobooks", "poetry", "classic novels", "book clubs"],
    "cooking": ["sourdough", "cast iron pans", "meal prep", "spicy curry", "vegan baking", "knife skills"],
    "gaming": ["speedruns", "retro consoles", "co-op games", "indie games", "strategy games", "game controllers"],
    "movies": ["horror films", "film scores", "documentaries", "silent films", "sci-fi movies", "movie trailers"],
    "music": ["vinyl records", "guitar pedals", "jazz albums", "home studios", "music theory", "live concerts"],
    "science": ["black holes", "gene editing", "fusion power", "bird migration", "deep sea life", "volcanoes"],
    "sports": ["marathon training", "cycling gear", "chess openings", "rock climbing", "swimming drills", "skiing"],
    "travel": ["night trains", "budget hostels", "travel insurance", "packing lists", "road trips", "island hopping"],
}
POST_PATTERNS = [
    "What do you love about {}?",
    "Tips for getting into {}",
    "Unpopular opinion about {}",
    "My experience with {}",
    "Best resources to learn about {}",
    "Why is nobody talking about {}?",
]
ADJECTIVES = [
    "quiet",
    "brave",
    "lucky",
    "sleepy",
    "clever",
    "rapid",
    "gentle",
    "witty",
    "bold",
    "calm",
    "eager",
    "jolly",
]
ANIMALS = ["otter", "falcon", "panda", "badger", "heron", "lynx", "walrus", "gecko", "moose", "raven"]
COMMENT_TEXTS = [
    "Great point, thanks for sharing.",
    "I disagree, but interesting take.",
    "This is so true.",
    "Can you post a source?",
    "Same thing happened to me.",
    "Bookmarking this for later.",
    "Underrated post.",
    "I had no idea about this.",
    "Could not agree more.",
    "Thanks, this helped a lot.",
]

PROJECT_WORDS = [
    "fast",
    "tiny",
    "smart",
    "open",
    "micro",
    "cloud",
    "data",
    "pixel",
    "async",
    "secure",
    "simple",
    "rusty",
]
PROJECT_NOUNS = ["parser", "router", "cache", "logger", "scheduler", "editor", "crawler", "mailer", "toolkit"]
LANGUAGES = ["Python", "Go", "Rust", "JavaScript", "TypeScript", "Java", "C++", "Ruby"]
ISSUE_PATTERNS = [
    "Crash when {}",
    "Slow performance when {}",
    "Add option for {}",
    "Docs are unclear about {}",
    "Wrong error message when {}",
    "Support {}",
    "Flaky test for {}",
]
ISSUE_SUBJECTS = [
    "parsing empty files",
    "reading large inputs",
    "running on Windows",
    "using unicode paths",
    "logging in",
    "exporting to CSV",
    "retrying requests",
    "loading config files",
    "starting without network",
    "dark mode",
    "pagination",
    "sorting results",
    "timezones",
    "proxy settings",
]
LABELS = ["bug", "feature", "docs", "question", "performance"]
ROLES = ["Guest", "Reporter", "Developer", "Maintainer"]
MR_PATTERNS = ["Fix {}", "Refactor {}", "Improve {}", "Add tests for {}"]

PLACE_CATEGORIES = ["Cafe", "Museum", "Park", "Library", "Hospital", "Restaurant", "Hotel", "Station"]
PLACE_PREFIXES = [
    "Riverside",
    "Oakwood",
    "Maple",
    "Harbor",
    "Sunset",
    "Granite",
    "Willow",
    "Lakeview",
    "Cedar",
    "Summit",
    "Pinecrest",
    "Elmwood",
]
STREETS = ["Main", "Market", "Liberty", "Forbes", "Penn", "Grant", "Euclid", "High", "Lake", "Bridge"]
# Approximate city centres (lat, lon); places are scattered within ~10 km of them.
CITY_CENTRES = {
    "Pittsburgh": (40.4406, -79.9959),
    "Cleveland": (41.4993, -81.6944),
    "Columbus": (39.9612, -82.9988),
    "Buffalo": (42.8864, -78.8784),
    "Erie": (42.1292, -80.0851),
}
TRAVEL_MODES = {"Car": (1.3, 50.0), "Bike": (1.2, 16.0), "Foot": (1.1, 5.0)}  # road factor, km/h
