{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, NoStarIsType,
             DeriveGeneric, DeriveAnyClass, TypeFamilies #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
Weights written and read at run time: an AXI4-Stream slave port that carries
write and read messages to the engines' weight memories
('K2C.WeightMemory.WeightRam'), and an AXI4-Stream master port that answers
the reads, so a host loads new weights without a new synthesis and reads back
what is loaded (@keras2clash emit --writable-weights@;
docs/guide/integration.md, "Writable weights").

= The ports

@s_axis_weights_tdata@ (32 bits), @s_axis_weights_tvalid@,
@s_axis_weights_tlast@ in; @s_axis_weights_tready@ out: high but while a read
is answered (from the cycle after its count beat moves until its answer's last
beat moves). @m_axis_weights_tdata@ (32 bits), @m_axis_weights_tvalid@,
@m_axis_weights_tlast@ out, @m_axis_weights_tready@ in: the answers.

= A message

* a header beat: the layer's index on the bus in bits [31:24] (the table of
  the emitted project's README and Weights.hs: the engine layers in network
  order, from 0), bit 23 clear to write and set to read, the first word's
  address in bits [22:0];
* a write: then words, each @B@ beats of 32 bits, least significant first
  (@B = ceil(word bits / 32)@, the layer's; the bits past its word are
  ignored): a word goes to the address after the previous one's;
* a read: then one beat, the number of words in bits [23:0] (bits [31:24]
  ignored);
* @tlast@ on the message's last beat. A message may write one word or a whole
  layer (header address 0, every word in address order), and read any run of
  words.

The port drops what it cannot write, and never stalls on a write: a message
naming no layer (its index past the table) is skipped to its @tlast@; words
past the layer's last address, and a word cut short by @tlast@, are not
written. A read answers the words from its address on, at most to the layer's
last (none: no answer); beats after its count beat are skipped to @tlast@
once the answer has gone.

= An answer

The words read, in address order, each as @B@ beats least significant first,
the bits past the word 0: the beats a write of them would carry after its
header. @m_axis_weights_tlast@ is on the answer's last beat. A word's beats
follow each other as @m_axis_weights_tready@ takes them; between two words
the port loads the next for a cycle (tvalid low). The count beat moving in
cycle @t@, the first beat shows from @t + 2@: a word every @B + 1@ cycles
when never stalled.

= Timing, and images in flight

A word whose last beat moves in cycle @t@ is in its memory from cycle @t + 3@
on: the decoder's register holds it in @t + 1@, the memory's write register
('writable') in @t + 2@, and the RAM writes it at the end of that cycle; so is
it in the memory's read-back copy ('mirror'), and a read whose count beat
moves in @t + 2@ or later (the earliest a read after the write can send it)
answers it. The image input is closed ('closedWhile') while a write message is
open and from the cycle after any of its beats moves until 'QuietCycles'
cycles after it, so an image whose first beat moves after a write message is
computed with the new weights only. Images in the network while a message is
written are not: the host waits for the outputs of the images it has sent
before it writes, then sends the next images. The hardware does not check
this; an image in flight during a write gets a mix of old and new weights, and
a window whose first step comes within two cycles of a write to its idle
engine reads its words one step late, as do the windows right after it until
that engine idles ("K2C.WeightMemory"). A read leaves the image input open and
the engines alone: it reads the copies, so images stream on while it is
answered.

= Hardware

The decoder: a state of a few flip-flops, the word's @B@ slots of 32 bits
(each loaded by its own enable while a write comes in; loaded whole, then
shifted a slot a beat, while a read is answered: @m_axis_weights_tdata@ is
the first slot), the address counter, a count of the words a read has left,
a table of each layer's words and beats (constants). Each writable memory: one
register of the written address and word ('writable'), and the memory's write
port; and its read-back copy ('mirror'): a second block RAM of the same words
and width, with a register of its own before its write port and a comparison
of the address. In all @32 B + 2 sum (word bits + address bits + 1)@
flip-flops, about 100 more, and the copies' block RAM bits (as many as the
memories'). None of this is before a memory's read address or in the
datapath; the image input's ready gains one AND with a flip-flop.
-}
module K2C.WeightBus
  ( WeightWrite (..)
  , WeightBus
  , QuietCycles
  , weightPort
  , writable
  , mirror
  , readAnswer
  , closedWhile
  ) where

import Clash.Prelude

import K2C.Memory (Neuron, WeightRom (..))
import K2C.Stream (Stream)
import K2C.WeightMemory (WeightRam (..))

-- | A word on its way to a layer's memory: the layer's index, the address, and
-- the word's bits (the layer's word in the low bits).
data WeightWrite (layers :: Nat) (bits :: Nat) = WeightWrite
  { writeLayer   :: Index layers
  , writeAddress :: Unsigned 24
  , writeWord    :: BitVector bits
  } deriving (Generic, NFDataX)

-- | The decoded writes, one a cycle at most, from a register ('weightPort').
type WeightBus dom layers bits = Signal dom (Maybe (WeightWrite layers bits))

-- | Cycles the image input stays closed after a write message's last beat
-- (cycle @t@): the last write reaches the memory at the end of @t + 2@, the
-- memory reads word 0 again in @t + 3@ ("K2C.WeightMemory", "A writable
-- memory") and holds it from @t + 4@; an image beat moving in @t + 6@ or
-- later reaches an engine's first step two cycles later at the earliest.
type QuietCycles = 5

-- | Where the decoder is: before a header; in a write's words; skipping to
-- @tlast@; before a read's count beat; loading a word to answer (the
-- read-back memory shows it in this cycle); sending its beats.
data Phase = Header | Words | Skip | Count | Fetch | Answer
  deriving (Eq, Generic, NFDataX)

-- | The decoder's registers.
data Decoder layers beats = Decoder
  { phase    :: Phase
  , layer    :: Index layers
  , address  :: Unsigned 24    -- a write's next word; a read's next word to load
  , depth    :: Unsigned 24    -- the layer's words
  , beat     :: Index beats    -- the next beat's slot in the word
  , lastBeat :: Index beats    -- the layer's last slot
  , slots    :: Vec beats (BitVector 32)  -- a write's word; a read's word still to send, next beat first
  , out      :: Maybe (Index layers, Unsigned 24)  -- the word in the slots is to be written here
  , quiet    :: Index (QuietCycles + 1)
  , left     :: Unsigned 24    -- a read's words still to load or send, the one in the slots included
  , more     :: Bool           -- a read's message goes on after its count beat: skip it after the answer
  } deriving (Generic, NFDataX)

-- | The port: the table of the layers' memories (each one's words and its
-- beats a word, in bus order), their read-back ('readAnswer' of the layers'
-- 'mirror's: given the writes, the layer and the address in a cycle, that
-- word in the next), @s_axis_weights_tdata@, @_tvalid@, @_tlast@ and
-- @m_axis_weights_tready@. Gives the writes (registered), whether the image
-- input is closed (registered state only), @s_axis_weights_tready@ and
-- @m_axis_weights_tdata@, @_tvalid@, @_tlast@ (registered state only).
weightPort
  :: forall dom layers beats
   . ( HiddenClockResetEnable dom
     , KnownNat layers, 1 <= layers, KnownNat beats, 1 <= beats )
  => Vec layers (Unsigned 24, Index (beats + 1))
  -> (  WeightBus dom layers (beats * 32) -> Signal dom (Index layers) -> Signal dom (Unsigned 24)
     -> Signal dom (BitVector (beats * 32)) )
  -> Signal dom (BitVector 32)
  -> Signal dom Bit
  -> Signal dom Bit
  -> Signal dom Bit
  -> ( WeightBus dom layers (beats * 32), Signal dom Bool, Signal dom Bit
     , Signal dom (BitVector 32), Signal dom Bit, Signal dom Bit )
weightPort table readBack tdata tvalid tlast tready =
  (writes, closed <$> state, boolToBit <$> ready, (!! (0 :: Int)) . slots <$> state, boolToBit <$> sending, boolToBit <$> (finalBeat <$> state))
  where
    enabled = fromEnable hasEnable
    -- a read's answer holds the port: no message beat moves from its count beat until its last answer beat
    ready   = enabled .&&. (not . answering . phase <$> state)
    moved   = ready .&&. (bitToBool <$> tvalid)
    sending = enabled .&&. ((== Answer) . phase <$> state)
    sent    = sending .&&. (bitToBool <$> tready)
    writes  = written <$> state
    memory  = readBack writes (layer <$> state) (address <$> state)
    state   = register idle (step <$> state <*> moved <*> tdata <*> (bitToBool <$> tlast) <*> sent <*> memory)
    idle    = Decoder Header 0 0 0 0 0 (repeat 0) Nothing 0 0 False

    -- a read's answer leaves the image input open: it reads the copies ('mirror'), not the
    -- memories the engines walk
    closed s = phase s == Words || phase s == Skip || quiet s /= 0
    answering p = p == Fetch || p == Answer
    finalBeat s = beat s == lastBeat s && left s == 1

    -- The word is the slots themselves, not a copy: in the cycle the write is shown, a beat
    -- moving in changes the slots only at that cycle's end, when 'writable' takes the word.
    written s = (\(l, a) -> WeightWrite l a (pack (reverse (slots s)))) <$> out s

    step s mv d lst sn word = case phase s of
      Fetch -> s0 { phase = Answer
                  , slots = reverse (unpack word)
                  , beat = 0
                  , address = address s + 1 }
      Answer
        | not sn -> s0
        | finalBeat s -> s0 { phase = if more s then Skip else Header, left = 0 }
        | beat s == lastBeat s -> s0 { phase = Fetch, left = left s - 1 }
        | otherwise -> s0 { slots = slots s <<+ 0, beat = beat s + 1 }
      _ | not mv -> s0
      Header
        | named >= natToNum @layers -> s' { phase = if lst then Header else Skip }
        | otherwise ->
            let (words, beats) = table !! named
                decoded = s { phase = if lst then Header else if reads then Count else Words
                            , layer = fromIntegral named
                            , address = resize (unpack (slice d22 d0 d) :: Unsigned 23)
                            , depth = words
                            , beat = 0
                            , lastBeat = fromIntegral (beats - 1) }
            in  if reads then decoded { out = Nothing, quiet = quiet s0 } else decoded { out = Nothing, quiet = maxBound }
      Words ->
        let full  = replace (beat s) d (slots s)
            done  = beat s == lastBeat s
        in  s' { phase = if lst then Header else Words
               , slots = full
               , beat = if done || lst then 0 else beat s + 1
               , address = if done then address s + 1 else address s
               , out = if done && address s < depth s then Just (layer s, address s) else Nothing }
      Count ->
        let count = unpack (slice d23 d0 d) :: Unsigned 24
            room  = if address s < depth s then depth s - address s else 0
            words = min count room
        in  if words == 0 then s0 { phase = if lst then Header else Skip }
            else s0 { phase = Fetch, left = words, more = not lst }
      Skip -> s' { phase = if lst then Header else Skip }
      where
        s0    = s { out = Nothing, quiet = if quiet s == 0 then 0 else quiet s - 1 }
        s'    = s { out = Nothing, quiet = maxBound }
        named = unpack (slice d31 d24 d) :: Unsigned 8
        reads = testBit d 23

-- | Layer @me@'s memory: the ROM file @rom@ in a block RAM written from the
-- bus. The write is registered here, one register of the address and the
-- word, so the bus's fan-out to the memories is a register stage of its own.
writable
  :: forall dom layers bits words p ch w bias
   . ( HiddenClockResetEnable dom
     , KnownNat layers, KnownNat bits, KnownNat words, KnownNat p, KnownNat ch
     , BitPack w, BitPack bias, NFDataX w, NFDataX bias )
  => Index layers
  -> WeightBus dom layers bits
  -> WeightRom words p ch w bias
  -> WeightRam dom words p ch w bias
writable me bus rom = WeightRam rom (register Nothing (mine <$> bus))
  where
    mine :: Maybe (WeightWrite layers bits) -> Maybe (Index words, Vec p (Neuron ch w bias))
    mine (Just (WeightWrite l a bits))
      | l == me = Just (fromIntegral a, unpack (resize bits))
    mine _ = Nothing

-- | The read-back copy of layer @me@'s memory: a block RAM of the ROM file
-- @rom@, written from the bus through a register as 'writable' writes the
-- memory (so each word is in both from the same cycle on), read at
-- @address@ (word 0 past the memory's end), the word a cycle later in the low
-- bits of the bus's width. The engine's memory sits inside its layer, whose
-- only outputs are its stream: the port reads this copy instead, and a read
-- never touches the memory the engine walks.
mirror
  :: forall dom layers bits words p ch w bias
   . ( HiddenClockResetEnable dom
     , KnownNat layers, KnownNat bits, KnownNat words, KnownNat p, KnownNat ch
     , BitPack w, BitPack bias )
  => Index layers
  -> WeightBus dom layers bits
  -> WeightRom words p ch w bias
  -> Signal dom (Unsigned 24)
  -> Signal dom (BitVector bits)
mirror me bus (WeightRom path) address =
  resize <$> blockRamFile (SNat @words) path (at <$> address) (register Nothing (mine <$> bus))
  where
    at :: Unsigned 24 -> Index words
    at a = if a < natToNum @words then fromIntegral a else 0
    mine :: Maybe (WeightWrite layers bits) -> Maybe (Index words, BitVector (BitSize (Vec p (Neuron ch w bias))))
    mine (Just (WeightWrite l a bits))
      | l == me = Just (fromIntegral a, resize bits)
    mine _ = Nothing

-- | The read-back of the layer a read names: its 'mirror''s word.
readAnswer :: KnownNat layers => Signal dom (Index layers) -> Vec layers (Signal dom (BitVector bits)) -> Signal dom (BitVector bits)
readAnswer layer words = (!!) <$> bundle words <*> layer

-- | The image input, closed while @closed@ (a weight message is being
-- written): no beat moves in, the stage's ready is low.
closedWhile :: Signal dom Bool -> Stream dom a a
closedWhile closed (input, ready) = (mux closed (pure Nothing) input, not <$> closed .&&. ready)
