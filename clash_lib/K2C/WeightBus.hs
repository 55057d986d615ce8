{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, NoStarIsType,
             DeriveGeneric, DeriveAnyClass, TypeFamilies #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
Weights written at run time: an AXI4-Stream slave port that carries write messages into the
engines' weight memories ('K2C.WeightMemory.WeightRam'), so a host loads new weights without
a new synthesis (@keras2clash emit --writable-weights@; docs/guide/integration.md, "Writable
weights"). Reading them back is "K2C.WeightReadBack" (@--readable-weights@), a port of its
own because it doubles the memories' block RAM; this one only writes.

= The port

@s_axis_weights_tdata@ (32 bits), @s_axis_weights_tvalid@,
@s_axis_weights_tlast@ in; @s_axis_weights_tready@ out, always high: the port
takes a beat every cycle, and a memory takes a word every cycle.

= A message

* a header beat: the layer's index on the bus in bits [31:24] (the table of
  the emitted project's README and Weights.hs: the engine layers in network
  order, from 0), the first word's address in bits [23:0];
* then words, each @B@ beats of 32 bits, least significant first (@B =
  ceil(word bits / 32)@, the layer's; the bits past its word are ignored): a
  word goes to the address after the previous one's;
* @tlast@ on the message's last beat. A message may write one word or a whole
  layer (header address 0, every word in address order).

The port drops what it cannot write, and never stalls: a message naming no layer (its index
past the table) is skipped to its @tlast@; words past the layer's last address, and a word
cut short by @tlast@, are not written. A memory has at most 2^23 words, so a header with bit
23 set (a read message of "K2C.WeightReadBack") writes past every memory's end: such a
message writes nothing, gets no answer, and closes the image input as any message does.

= Timing, and images in flight

A word whose last beat moves in cycle @t@ is in its memory from cycle @t + 3@ on: the
decoder's register holds it in @t + 1@, the memory's write register ('writable') in @t + 2@,
and the RAM writes it at the end of that cycle. The image input is closed ('closedWhile')
while a message is open and from the cycle after any weight beat moves until 'QuietCycles'
cycles after it, so an image whose first beat moves after a message is computed with the new
weights only. Images in the network while a message is written are not: the host waits for
the outputs of the images it has sent before it writes, then sends the next images. The
hardware does not check this; an image in flight during a write gets a mix of old and new
weights, and a window whose first step comes within two cycles of a write to its idle engine
reads its words one step late, as do the windows right after it until that engine idles
("K2C.WeightMemory").

= Hardware

The decoder: a state of a few flip-flops, the word's @B@ slots of 32 bits (each loaded by
its own enable: no shifter; the decoded write's word is these slots), the address counter, a
table of each layer's words and beats (constants). Each writable memory: one register of the
written address and word ('writable'), and the memory's write port: @32 B + sum (word bits +
address bits + 1)@ flip-flops in all, and about 60 more. None of this is before a memory's
read address or in the datapath; the image input's ready gains one AND with a flip-flop.
-}
module K2C.WeightBus
  ( WeightWrite (..)
  , WeightBus
  , QuietCycles
  , weightPort
  , writable
  , closedWhile
  ) where

import Clash.Prelude

import K2C.Memory (Neuron, WeightRom)
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

-- | Cycles the image input stays closed after a weight message's last beat
-- (cycle @t@): the last write reaches the memory at the end of @t + 2@, the
-- memory reads word 0 again in @t + 3@ ("K2C.WeightMemory", "A writable
-- memory") and holds it from @t + 4@; an image beat moving in @t + 6@ or
-- later reaches an engine's first step two cycles later at the earliest.
type QuietCycles = 5

data Phase = Header | Words | Skip
  deriving (Eq, Generic, NFDataX)

-- | The decoder's registers.
data Decoder layers beats = Decoder
  { phase    :: Phase
  , layer    :: Index layers
  , address  :: Unsigned 24
  , depth    :: Unsigned 24    -- the layer's words
  , beat     :: Index beats    -- the next beat's slot in the word
  , lastBeat :: Index beats    -- the layer's last slot
  , slots    :: Vec beats (BitVector 32)
  , out      :: Maybe (Index layers, Unsigned 24)  -- the word in the slots is to be written here
  , quiet    :: Index (QuietCycles + 1)
  } deriving (Generic, NFDataX)

-- | The port: the table of the layers' memories (each one's words and its
-- beats a word, in bus order), and @s_axis_weights_tdata@, @_tvalid@,
-- @_tlast@. Gives the writes (registered), whether the image input is closed
-- (registered state only), and @s_axis_weights_tready@.
weightPort
  :: forall dom layers beats
   . ( HiddenClockResetEnable dom
     , KnownNat layers, 1 <= layers, KnownNat beats, 1 <= beats )
  => Vec layers (Unsigned 24, Index (beats + 1))
  -> Signal dom (BitVector 32)
  -> Signal dom Bit
  -> Signal dom Bit
  -> (WeightBus dom layers (beats * 32), Signal dom Bool, Signal dom Bit)
weightPort table tdata tvalid tlast = (written <$> state, closed <$> state, ready)
  where
    enabled = fromEnable hasEnable
    ready   = boolToBit <$> enabled
    moved   = enabled .&&. (bitToBool <$> tvalid)
    state   = register idle (step <$> state <*> moved <*> tdata <*> (bitToBool <$> tlast))
    idle    = Decoder Header 0 0 0 0 0 (repeat 0) Nothing 0

    closed s = phase s /= Header || quiet s /= 0

    -- The word is the slots themselves, not a copy: in the cycle the write is shown, a beat
    -- moving in changes the slots only at that cycle's end, when 'writable' takes the word.
    written s = (\(l, a) -> WeightWrite l a (pack (reverse (slots s)))) <$> out s

    step s False _ _ = s { out = Nothing, quiet = if quiet s == 0 then 0 else quiet s - 1 }
    step s True d lst = case phase s of
      Header
        | named >= natToNum @layers -> s' { phase = if lst then Header else Skip }
        | otherwise ->
            let (words, beats) = table !! named
            in  s' { phase = if lst then Header else Words
                   , layer = fromIntegral named
                   , address = unpack (slice d23 d0 d)
                   , depth = words
                   , beat = 0
                   , lastBeat = fromIntegral (beats - 1) }
      Words ->
        let full  = replace (beat s) d (slots s)
            done  = beat s == lastBeat s
        in  s' { phase = if lst then Header else Words
               , slots = full
               , beat = if done || lst then 0 else beat s + 1
               , address = if done then address s + 1 else address s
               , out = if done && address s < depth s then Just (layer s, address s) else Nothing }
      Skip -> s' { phase = if lst then Header else Skip }
      where
        s'    = s { out = Nothing, quiet = maxBound }
        named = unpack (slice d31 d24 d) :: Unsigned 8

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

-- | The image input, closed while @closed@ (a weight message is being
-- written): no beat moves in, the stage's ready is low.
closedWhile :: Signal dom Bool -> Stream dom a a
closedWhile closed (input, ready) = (mux closed (pure Nothing) input, not <$> closed .&&. ready)
